// Samplers: the order in which a DataLoader visits a data set, per epoch. An epoch's order
// depends only on the sampler's settings and the epoch number (so a resumed run sees the
// same order), never on how many times indices() was called.
#pragma once

#include <cstdint>
#include <vector>

namespace ringflow::data {

class Sampler {
 public:
  virtual ~Sampler() = default;
  // The data-set indices of one epoch, in visiting order.
  virtual std::vector<int64_t> indices(int64_t epoch) const = 0;
  // indices(epoch).size(), the same every epoch.
  virtual int64_t size() const = 0;
};

// 0, 1, ..., n - 1 every epoch.
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t n);
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override { return n_; }

 private:
  int64_t n_;
};

// A permutation of 0..n-1 per epoch: random_permutation(n, seed + epoch).
class RandomSampler : public Sampler {
 public:
  RandomSampler(int64_t n, uint64_t seed);
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override { return n_; }

 private:
  int64_t n_;
  uint64_t seed_;
};

// A uniform permutation of 0..n-1 (Fisher-Yates over ringflow's Generator(seed)): the same
// on every machine for a given seed, but not the permutation torch.randperm would give.
std::vector<int64_t> random_permutation(int64_t n, uint64_t seed);

}  // namespace ringflow::data
