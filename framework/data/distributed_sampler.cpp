#include "ringflow/framework/data/distributed_sampler.h"

#include <numeric>

#include "ringflow/framework/error.h"

namespace ringflow::data {

DistributedSampler::DistributedSampler(int64_t n, int64_t world, int64_t rank, DistributedSamplerOptions options)
    : n_(n), world_(world), rank_(rank), options_(options) {
  RF_CHECK(n >= 0, "DistributedSampler: negative data-set size ", n);
  RF_CHECK(world >= 1, "DistributedSampler: world size must be positive, got ", world);
  RF_CHECK(rank >= 0 && rank < world, "DistributedSampler: rank ", rank, " outside [0, ", world, ")");
  // torch: ceil((n - world) / world) with drop_last and n % world != 0, else ceil(n / world).
  num_samples_ = options.drop_last ? n / world : (n + world - 1) / world;
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) const {
  std::vector<int64_t> order;
  if (options_.shuffle) {
    order = random_permutation(n_, options_.seed + static_cast<uint64_t>(epoch));
  } else {
    order.resize(static_cast<size_t>(n_));
    std::iota(order.begin(), order.end(), int64_t{0});
  }
  const int64_t total = total_size();
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  // Position p of the padded (or cut) order is order[p % n]: padding repeats the first indices.
  for (int64_t p = rank_; p < total; p += world_) mine.push_back(order[static_cast<size_t>(p % n_)]);
  return mine;
}

}  // namespace ringflow::data
