// CommEvent: one collective as a rank saw it, for reports and traces: when the data was
// ready, when it was issued, when the communication thread ran it, and the bytes it moved.
// comm produces them (DDP's buckets and buffer broadcast, any Works through add); apps only
// aggregate them.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "ringflow/comm/base/traffic.h"
#include "ringflow/comm/group/work.h"

namespace ringflow::comm {

struct CommEvent {
  using Clock = std::chrono::steady_clock;
  std::string name;                      // "bucket 2", a parameter's name, "buffers"
  std::string collective = "allreduce";  // "broadcast", "reduce+broadcast", ...
  int index = 0;                         // the bucket's or the parameter's, in issue order
  int64_t bytes = 0;                     // payload
  Traffic traffic;  // counted as the bytes went (or modelled where the backend's own ran)
  Traffic model;    // the closed form of what it moves (ProcessGroup::allreduce_traffic_model)
  Clock::time_point ready;     // its data was ready (DDP: its last gradient arrived)
  Clock::time_point launched;  // issued by the training thread
  Clock::time_point started;   // the communication thread began it
  Clock::time_point finished;  // ... and ended it

  // Folds in a completed Work of this event: its traffic, its start if it is the first,
  // its end.
  void add(const Work& w) {
    traffic += w.traffic();
    if (started == Clock::time_point{}) started = w.start_time();
    finished = w.end_time();
  }
  double ms() const { return std::chrono::duration<double, std::milli>(finished - started).count(); }
};

}  // namespace ringflow::comm
