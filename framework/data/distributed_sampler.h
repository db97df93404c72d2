// DistributedSampler: the share of a data set that one rank of `world` processes visits in
// an epoch, partitioned exactly as torch.utils.data.DistributedSampler does:
//   order: 0..n-1, or random_permutation(n, seed + epoch) when shuffling;
//   without drop_last, the order is padded to world * ceil(n / world) by repeating its
//   first indices (cyclically, when fewer than needed), so every rank gets the same count;
//   with drop_last, it is cut to world * floor(n / world);
//   rank r takes positions r, r + world, r + 2 world, ...
// With shuffle the permutation is ringflow's, not torch.randperm's (a different generator):
// the partition rule is the same, the shuffled order is not. Every rank must use the same
// seed so that the shares are disjoint.
#pragma once

#include <cstdint>
#include <vector>

#include "ringflow/framework/data/sampler.h"

namespace ringflow::data {

struct DistributedSamplerOptions {
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;
};

class DistributedSampler : public Sampler {
 public:
  DistributedSampler(int64_t n, int64_t world, int64_t rank, DistributedSamplerOptions options = {});
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override { return num_samples_; }
  int64_t num_samples() const { return num_samples_; }  // per rank, as size()
  int64_t total_size() const { return num_samples_ * world_; }

 private:
  int64_t n_, world_, rank_;
  DistributedSamplerOptions options_;
  int64_t num_samples_;
};

}  // namespace ringflow::data
