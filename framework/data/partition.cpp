#include "ringflow/framework/data/partition.h"

#include <cmath>
#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <utility>

#include "ringflow/framework/data/transforms.h"
#include "ringflow/framework/error.h"
#include "ringflow/framework/random.h"

namespace ringflow::data {
namespace {

// Gamma(shape, 1) by Marsaglia and Tsang (2000), boosted for shape < 1; drawn from ringflow's
// Generator so that every machine cuts the same partition.
double gamma_sample(Generator& gen, double shape) {
  if (shape < 1) return gamma_sample(gen, shape + 1) * std::pow(gen.uniform(), 1 / shape);
  const double d = shape - 1.0 / 3, c = 1 / std::sqrt(9 * d);
  for (;;) {
    const double x = gen.normal();
    double v = 1 + c * x;
    if (v <= 0) continue;
    v = v * v * v;
    const double u = gen.uniform();
    if (u > 0 && std::log(u) < 0.5 * x * x + d - d * v + d * std::log(v)) return d * v;
  }
}

}  // namespace

Partition partition_from_name(const std::string& name) {
  if (name == "iid") return {};
  const std::string prefix = "dirichlet:";
  if (name.rfind(prefix, 0) == 0) {
    const std::string value = name.substr(prefix.size());
    char* end = nullptr;
    const double alpha = std::strtod(value.c_str(), &end);
    if (!value.empty() && *end == '\0' && std::isfinite(alpha) && alpha > 0) return {alpha};
  }
  throw std::invalid_argument("partition '" + name +
                              "': expected iid or dirichlet:ALPHA with ALPHA > 0 (e.g. dirichlet:0.5)");
}

std::vector<std::vector<int64_t>> dirichlet_partition(const Dataset& data, int users,
                                                      double alpha, uint64_t seed) {
  RF_CHECK(users >= 1, "dirichlet_partition: ", users, " users");
  RF_CHECK(alpha > 0, "dirichlet_partition: alpha must be positive, got ", alpha);
  std::vector<std::vector<int64_t>> by_class(static_cast<size_t>(data.num_classes()));
  for (int64_t i = 0; i < data.size(); ++i) {
    const int64_t label = data.label(i);
    RF_CHECK(label >= 0 && label < data.num_classes(), "dirichlet_partition: example ", i,
             " has label ", label, " outside [0, ", data.num_classes(), ")");
    by_class[static_cast<size_t>(label)].push_back(i);
  }
  Generator gen(seed);
  std::vector<std::vector<int64_t>> shares(static_cast<size_t>(users));
  std::vector<double> p(static_cast<size_t>(users));
  for (std::vector<int64_t>& members : by_class) {
    const auto n = static_cast<int64_t>(members.size());
    for (int64_t i = n - 1; i > 0; --i) std::swap(members[i], members[uniform_int(gen, i + 1)]);
    double total = 0;
    for (double& x : p) total += (x = gamma_sample(gen, alpha));
    // Cut at the rounded cumulative proportions: the runs tile the class exactly.
    double cumulative = 0;
    int64_t start = 0;
    for (int u = 0; u < users; ++u) {
      cumulative += p[static_cast<size_t>(u)];
      const int64_t end = u + 1 == users ? n : std::llround(cumulative / total * static_cast<double>(n));
      for (int64_t k = start; k < std::max(start, end); ++k) shares[static_cast<size_t>(u)].push_back(members[k]);
      start = std::max(start, end);
    }
  }
  return shares;
}

ShardSampler::ShardSampler(std::vector<int64_t> indices, uint64_t seed)
    : indices_(std::move(indices)), seed_(seed) {}

std::vector<int64_t> ShardSampler::indices(int64_t epoch) const {
  const std::vector<int64_t> order = random_permutation(size(), seed_ + static_cast<uint64_t>(epoch));
  std::vector<int64_t> out(order.size());
  for (size_t k = 0; k < order.size(); ++k) out[k] = indices_[static_cast<size_t>(order[k])];
  return out;
}

}  // namespace ringflow::data
