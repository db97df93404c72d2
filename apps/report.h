// train's measurements and reports: one rank's figures per iteration (phases, bytes,
// overlap), the epoch's over every rank (mean and max, in two allreduces), rank 0's table
// and the JSON-lines metrics.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "ringflow/comm/ddp/bucket_tuner.h"
#include "ringflow/comm/group/process_group.h"
#include "ringflow/kernels/build_info.h"

namespace ringflow::apps {

using Clock = std::chrono::steady_clock;
using WallClock = std::chrono::system_clock;  // the metrics' wall_time

// forward and backward are compute only; comm is the time the training thread waited for
// communication (ddp's buffer broadcast and end-of-backward wait, or the reduction after
// backward of gather-scatter and allreduce).
enum Phase { kData, kForward, kBackward, kComm, kOptimizer, kPhases };
inline constexpr const char* kPhaseNames[kPhases] = {"data", "forward", "backward", "comm", "optimizer"};
inline constexpr const char* kPhaseLabels[kPhases] = {"data wait", "forward", "backward compute",
                                               "comm wait (exposed)", "optimizer"};

double ms_between(Clock::time_point a, Clock::time_point b);
inline double ms_since(Clock::time_point t) { return ms_between(t, Clock::now()); }
// Seconds since 1970-01-01 00:00 UTC, with fractions.
double unix_seconds(WallClock::time_point t);
// For people: "45 s", "12 min 3 s", "2 h 5 min".
std::string duration_text(double seconds);

// One rank's timings and bytes for one iteration, or per iteration averaged over an epoch.
struct Figures {
  double phase_ms[kPhases] = {};
  double step_ms = 0;
  double comm_total_ms = 0;  // the communication thread's time
  double comm_cpu_ms = 0;    // ... and the CPU time it used (comm_thread_cpu_time)
  double bytes_sent = 0, bytes_received = 0;
  double overlap = 0;  // 1 - exposed / comm_total_ms (0 without communication)
  static constexpr size_t kValues = kPhases + 6;

  Figures& operator+=(const Figures& o) {
    for (int p = 0; p < kPhases; ++p) phase_ms[p] += o.phase_ms[p];
    step_ms += o.step_ms;
    comm_total_ms += o.comm_total_ms;
    comm_cpu_ms += o.comm_cpu_ms;
    bytes_sent += o.bytes_sent;
    bytes_received += o.bytes_received;
    return *this;  // overlap is not additive: see with_overlap()
  }
  Figures divided(double n) const {
    Figures r;
    for (int p = 0; p < kPhases; ++p) r.phase_ms[p] = phase_ms[p] / n;
    r.step_ms = step_ms / n;
    r.comm_total_ms = comm_total_ms / n;
    r.comm_cpu_ms = comm_cpu_ms / n;
    r.bytes_sent = bytes_sent / n;
    r.bytes_received = bytes_received / n;
    r.overlap = overlap / n;
    return r;
  }
  Figures with_overlap() const {
    Figures r = *this;
    r.overlap = comm_total_ms > 0 ? std::clamp(1 - phase_ms[kComm] / comm_total_ms, 0.0, 1.0) : 0;
    return r;
  }
  void append_to(std::vector<double>& v) const {
    v.insert(v.end(), phase_ms, phase_ms + kPhases);
    v.insert(v.end(), {step_ms, comm_total_ms, comm_cpu_ms, bytes_sent, bytes_received, overlap});
  }
  static Figures read(const double*& p) {
    Figures f;
    for (double& x : f.phase_ms) x = *p++;
    f.step_ms = *p++;
    f.comm_total_ms = *p++;
    f.comm_cpu_ms = *p++;
    f.bytes_sent = *p++;
    f.bytes_received = *p++;
    f.overlap = *p++;
    return f;
  }
};

// A logged iteration (every --log-every), as one rank saw it.
struct IterationRecord {
  int64_t step = 0, global_iteration = 0;
  Figures figures;
  double loss = 0;  // this rank's, averaged over the iterations since the last record
  double correct = 0, seen = 0;  // this iteration's
  static constexpr size_t kValues = Figures::kValues + 3;  // the above, not logged_at
  WallClock::time_point logged_at;  // when this rank logged it
};

// What one rank moved in a whole epoch (every step, the first too, and fedavg's rounds):
// counted by the transport, and by the closed forms of the collectives it ran.
struct EpochTraffic {
  double sent = 0, received = 0;
  double model_sent = 0, model_received = 0;
  double rounds = 0;  // fedavg's model averages
  static constexpr size_t kValues = 5;

  void add(const comm::Traffic& counted, const comm::Traffic& model, int n_rounds) {
    sent += static_cast<double>(counted.sent);
    received += static_cast<double>(counted.received);
    model_sent += static_cast<double>(model.sent);
    model_received += static_cast<double>(model.received);
    rounds += n_rounds;
  }
  void append_to(std::vector<double>& v) const {
    v.insert(v.end(), {sent, received, model_sent, model_received, rounds});
  }
  static EpochTraffic read(const double*& p) {
    EpochTraffic t;
    for (double* x : {&t.sent, &t.received, &t.model_sent, &t.model_received, &t.rounds}) *x = *p++;
    return t;
  }
};

struct EpochStats {
  Figures sum;  // over the iterations after the first
  int64_t timed_steps = 0;
  Figures first;  // the first iteration's: the epoch's figures when it ran no other
  double loss_sum = 0;  // over micro-batches
  int64_t correct = 0, seen = 0, batches = 0;
  int64_t skipped = 0;  // fp16: this rank's optimizer steps skipped for inf/NaN gradients
  EpochTraffic traffic;
  std::vector<IterationRecord> logged;
};

// What rank 0 reports: means over the ranks and maxima (the slowest rank of each figure);
// loss, accuracy and counts summed over the ranks.
struct AcrossRanks {
  Figures mean, max;  // per iteration
  bool first_only = false;  // the figures are the first iteration's (the epoch ran no other)
  EpochTraffic traffic_mean, traffic_max;  // per rank, the whole epoch
  double loss_sum = 0;
  int64_t correct = 0, seen = 0, batches = 0;
  struct Iteration {
    const IterationRecord* mine;
    Figures mean, max;
    double loss = 0;  // the mean over ranks: the loss of the global batch
    double correct = 0, seen = 0;
  };
  std::vector<Iteration> logged;
};

// The smallest of every rank's `value` (one one-element allreduce; collective). Without a
// group of several ranks, value itself.
double min_over_ranks(double value, comm::ProcessGroup* pg, comm::Timeout timeout);

// The epoch's figures and the logged iterations' over every rank (those that every rank
// logged), in the two allreduces (sum, max) of one vector that the epoch's end runs anyway: the iteration records cost no
// collective of their own, which is why under mpiexec they reach the metrics file at the
// end of the epoch. Without a group, this rank's as mean and max.
AcrossRanks across_ranks(const EpochStats& s, comm::ProcessGroup* pg, comm::Timeout timeout);

// The phases, and with a group the communication figures: means under the plain names
// (data_ms, comm_total_ms, overlap, ...), max_* beside them.
void put_figures(nlohmann::json& j, const Figures& mean, const Figures* max);
// The epoch's bytes per rank, counted and by the closed form (epoch_bytes_sent, ...,
// epoch_bytes_sent_closed_form, max_epoch_bytes_sent, rounds).
void put_epoch_traffic(nlohmann::json& j, const AcrossRanks& a);

// ddp's bucket tuner's trials and choice: one log line, and a metrics record
// {"type": "bucket_tuning", "tried": [{first_mb, cap_mb, backward_ms}...], "chosen": {...}}.
std::string describe_bucket_tuning(const comm::BucketTuning& t);
nlohmann::json bucket_tuning_json(const comm::BucketTuning& t);

// Rank 0's table at the end of an epoch: per iteration, the mean over the ranks and the
// largest rank's figure (each row its own slowest rank), then the epoch's bytes per rank
// beside their closed form. One process: its own figures.
void print_epoch_table(const AcrossRanks& a, int world, bool distributed);

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
