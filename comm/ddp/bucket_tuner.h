// BucketTuner: the choice of DDP's bucket caps from measurements, as Horovod's autotune
// chooses its fusion buffer, where PyTorch users pick bucket_cap_mb by hand. It tries each
// candidate cap (with the 1 MiB first bucket) for a few synchronised iterations, keeps the
// fastest, then tries that cap without the small first bucket and keeps the faster of the
// two. An iteration's time is its backward with the communication that backward waits for
// (backward_start to backward_end), the one part the caps change. Every rank decides alike:
// the reducer gives it the slowest rank's medians (the step's pace) at each decision.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ringflow/comm/ddp/buckets.h"

namespace ringflow::comm {

struct BucketCaps {
  double first_mb = 1;  // the first bucket's cap, MiB
  double cap_mb = 25;   // every later bucket's, MiB

  std::vector<int64_t> bytes() const { return bucket_caps(first_mb, cap_mb); }  // buckets.h
  bool operator==(const BucketCaps&) const = default;
};

struct BucketTunerOptions {
  std::vector<double> caps_mb = {1, 5, 10, 25, 50, 100};
  int warmup = 1;    // iterations after each re-bucketing, not timed (fresh buffers)
  int measured = 3;  // timed iterations per candidate; their median counts
};

// What was tried, in order, each with its median time (slowest rank), and what was kept.
struct BucketTuning {
  std::vector<BucketCaps> tried;
  std::vector<double> ms;
  int chosen = -1;  // index into tried; -1 while tuning
  bool done() const { return chosen >= 0; }
};

class BucketTuner {
 public:
  explicit BucketTuner(BucketTunerOptions options = {});

  // The caps to run the next iteration with.
  BucketCaps current() const;
  bool done() const { return tuning_.done(); }
  const BucketTuning& tuning() const { return tuning_; }

  // One synchronised iteration's time on this rank. True when a round is complete: then
  // every rank must call agree() with, per candidate of round_medians(), the maximum over
  // the ranks.
  bool record(double ms);
  std::vector<double> round_medians() const;
  void agree(const std::vector<double>& slowest);

 private:
  BucketTunerOptions options_;
  std::vector<BucketCaps> round_;       // this round's candidates
  size_t candidate_ = 0;                // within round_
  int seen_ = 0;                        // iterations of the current candidate
  std::vector<std::vector<double>> samples_;  // per candidate of the round
  int rounds_done_ = 0;
  BucketTuning tuning_;
};

}  // namespace ringflow::comm
