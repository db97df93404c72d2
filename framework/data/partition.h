// How a data set is split among the users of federated training: iid (the equal random
// shares of DistributedSampler) or non-IID by label, each class cut among the users in
// proportions drawn from Dirichlet(alpha) (Hsu et al. 2019): the smaller alpha, the fewer
// classes each user holds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ringflow/framework/data/dataset.h"
#include "ringflow/framework/data/sampler.h"

namespace ringflow::data {

struct Partition {
  double dirichlet_alpha = 0;  // 0: iid
  bool iid() const { return dirichlet_alpha == 0; }
};
// "iid" or "dirichlet:ALPHA" (ALPHA > 0); throws naming the accepted forms.
Partition partition_from_name(const std::string& name);

// Users' shares of the examples: for each class, its examples in a random order, cut into
// `users` runs whose lengths follow Dirichlet(alpha) proportions. Every example goes to
// exactly one user; the same on every rank for a given seed.
std::vector<std::vector<int64_t>> dirichlet_partition(const Dataset& data, int users,
                                                      double alpha, uint64_t seed);

// A fixed set of indices, visited in a fresh random order each epoch.
class ShardSampler : public Sampler {
 public:
  ShardSampler(std::vector<int64_t> indices, uint64_t seed);
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }

 private:
  std::vector<int64_t> indices_;
  uint64_t seed_;
};

}  // namespace ringflow::data
