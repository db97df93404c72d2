#include "ringflow/framework/data/sampler.h"

#include <numeric>
#include <utility>

#include "ringflow/framework/data/transforms.h"
#include "ringflow/framework/error.h"
#include "ringflow/framework/random.h"

namespace ringflow::data {

SequentialSampler::SequentialSampler(int64_t n) : n_(n) {
  RF_CHECK(n >= 0, "SequentialSampler: negative size ", n);
}

std::vector<int64_t> SequentialSampler::indices(int64_t) const {
  std::vector<int64_t> out(static_cast<size_t>(n_));
  std::iota(out.begin(), out.end(), int64_t{0});
  return out;
}

RandomSampler::RandomSampler(int64_t n, uint64_t seed) : n_(n), seed_(seed) {
  RF_CHECK(n >= 0, "RandomSampler: negative size ", n);
}

std::vector<int64_t> RandomSampler::indices(int64_t epoch) const {
  return random_permutation(n_, seed_ + static_cast<uint64_t>(epoch));
}

std::vector<int64_t> random_permutation(int64_t n, uint64_t seed) {
  RF_CHECK(n >= 0, "random_permutation: negative size ", n);
  std::vector<int64_t> out(static_cast<size_t>(n));
  std::iota(out.begin(), out.end(), int64_t{0});
  Generator gen(seed);
  for (int64_t i = n - 1; i > 0; --i) std::swap(out[i], out[uniform_int(gen, i + 1)]);
  return out;
}

}  // namespace ringflow::data
