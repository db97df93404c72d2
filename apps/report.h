// train's reports: one rank's figures per iteration and epoch (train's schema,
// apps/step_metrics.h), the epoch's over every rank (in one collective), rank 0's table, the
// JSON-lines metrics and the trace's counters.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "ringflow/apps/step_metrics.h"
#include "ringflow/apps/telemetry.h"
#include "ringflow/apps/trace.h"
#include "ringflow/comm/ddp/bucket_tuner.h"
#include "ringflow/comm/group/process_group.h"
#include "ringflow/kernels/build_info.h"

namespace ringflow::apps {

using Clock = std::chrono::steady_clock;
using WallClock = std::chrono::system_clock;  // the metrics' wall_time

double ms_between(Clock::time_point a, Clock::time_point b);
inline double ms_since(Clock::time_point t) { return ms_between(t, Clock::now()); }
// Seconds since 1970-01-01 00:00 UTC, with fractions.
double unix_seconds(WallClock::time_point t);
// For people: "45 s", "12 min 3 s", "2 h 5 min".
std::string duration_text(double seconds);

// A logged iteration (every --log-every), as one rank saw it: its figures of train's schema
// (apps/step_metrics.h), loss that of the iterations since the last record.
struct IterationRecord {
  int64_t step = 0, global_iteration = 0;
  Values figures;
  WallClock::time_point logged_at;  // when this rank logged it
};

// One rank's epoch so far: its iterations added up, and the iterations it logged.
struct EpochStats {
  Tally tally{step_metrics().schema};
  std::vector<IterationRecord> logged;
};

// What rank 0 reports: the epoch's and the logged iterations' figures over every rank.
struct AcrossRanks {
  Combined epoch;
  bool first_only = false;  // the timings are the first iteration's (the epoch ran no other)
  struct Iteration {
    const IterationRecord* mine;
    Combined figures;
  };
  std::vector<Iteration> logged = {};
};

// The smallest of every rank's `value` (one one-element allreduce; collective). Without a
// group of several ranks, value itself.
double min_over_ranks(double value, comm::ProcessGroup* pg, comm::Timeout timeout);

// The epoch's figures and the logged iterations' over every rank (those that every rank
// logged), combined in the one collective that the epoch's end runs anyway
// (telemetry.h's combine_ranks): the iteration records cost no collective of their own,
// which is why under mpiexec they reach the metrics file at the end of the epoch.
AcrossRanks across_ranks(const EpochStats& s, comm::ProcessGroup* pg, comm::Timeout timeout);

// The figures of a `record` (kIterationRecord or kEpochRecord) into j, each under its key;
// with `max` (several ranks) the communication figures too, and beside those that the
// ranks combine by Across::mean_max the largest rank's as max_<key>.
void put_figures(nlohmann::json& j, Records record, const Values& value, const Values* max);

// Chrome trace counters ("ph": "C", at `at`) of an iteration's figures: one track per figure
// of the iteration records.
void trace_counters(TraceWriter& trace, Clock::time_point at, const Values& figures);

// ddp's bucket tuner's trials and choice: one log line, and a metrics record
// {"type": "bucket_tuning", "tried": [{first_mb, cap_mb, backward_ms}...], "chosen": {...}}.
std::string describe_bucket_tuning(const comm::BucketTuning& t);
nlohmann::json bucket_tuning_json(const comm::BucketTuning& t);

// Rank 0's table at the end of an epoch, a row per figure of the epoch records with a
// label: per iteration, the mean over the ranks and the largest rank's figure (each row its
// own slowest rank), then the epoch's totals per rank. One process: its own figures, and
// no communication. Lines end in '\n'.
std::string epoch_table(const Combined& epoch, int world, bool distributed);

// The record that opens a run's metrics: {"type": "header", "arguments": [...], "version",
// "commit", "build": {...}, "hosts": [...] (in rank order, each once), "world_size"}.
nlohmann::json metrics_header(const std::vector<std::string>& arguments, const BuildInfo& build,
                              const std::vector<std::string>& hosts, int world_size);

// --metrics: JSON lines appended to the file (none when the path is empty), each with the
// wall-clock time of what it records as "wall_time" (unix_seconds).
class Metrics {
 public:
  explicit Metrics(const std::string& path) {
    if (path.empty()) return;
    out_.open(path, std::ios::app);
    if (!out_) throw std::runtime_error("--metrics: cannot open '" + path + "' for writing");
  }
  void write(nlohmann::json j, WallClock::time_point when = WallClock::now()) {
    if (!out_.is_open()) return;
    j["wall_time"] = unix_seconds(when);
    out_ << j.dump() << "\n" << std::flush;
  }

 private:
  std::ofstream out_;
};

}  // namespace ringflow::apps
