#include "ringflow/comm/ddp/buckets.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "ringflow/framework/error.h"

namespace ringflow::comm {

std::vector<std::vector<size_t>> assign_buckets(const std::vector<BucketTensor>& tensors,
                                                const std::vector<size_t>& order,
                                                const std::vector<int64_t>& caps) {
  RF_CHECK(!caps.empty(), "assign_buckets: no bucket cap given");
  for (int64_t cap : caps) RF_CHECK(cap >= 0, "assign_buckets: negative bucket cap ", cap);
  RF_CHECK(order.size() == tensors.size(), "assign_buckets: order has ", order.size(),
           " entries for ", tensors.size(), " tensors");
  std::vector<bool> seen(tensors.size(), false);
  for (size_t i : order) {
    RF_CHECK(i < tensors.size() && !seen[i], "assign_buckets: order is not a permutation of 0..",
             tensors.size() - 1, " (index ", i, ")");
    seen[i] = true;
  }

  struct Open {
    std::vector<size_t> members;
    int64_t bytes = 0;
    size_t cap_index = 0;  // which of caps applies to this dtype's current bucket
  };
  std::map<DType, Open> open;
  struct Closed {
    size_t first_position;  // in `order`
    std::vector<size_t> members;
  };
  std::vector<Closed> closed;
  std::vector<size_t> position(tensors.size());
  for (size_t p = 0; p < order.size(); ++p) position[order[p]] = p;

  auto close = [&](Open& b) {
    closed.push_back({position[b.members.front()], std::move(b.members)});
    b.members.clear();
    b.bytes = 0;
    b.cap_index = std::min(b.cap_index + 1, caps.size() - 1);
  };
  for (size_t i : order) {
    Open& b = open[tensors[i].dtype];
    if (!b.members.empty() && b.bytes + tensors[i].bytes > caps[b.cap_index]) close(b);
    b.members.push_back(i);
    b.bytes += tensors[i].bytes;
  }
  for (auto& [dtype, b] : open) {
    if (!b.members.empty()) close(b);
  }
  std::sort(closed.begin(), closed.end(),
            [](const Closed& a, const Closed& b) { return a.first_position < b.first_position; });
  std::vector<std::vector<size_t>> buckets;
  buckets.reserve(closed.size());
  for (Closed& c : closed) buckets.push_back(std::move(c.members));
  return buckets;
}

std::vector<int64_t> bucket_caps(double first_bucket_cap_mb, double bucket_cap_mb) {
  RF_CHECK(bucket_cap_mb >= 0 && std::isfinite(bucket_cap_mb),
           "bucket_cap_mb must be >= 0, got ", bucket_cap_mb);
  RF_CHECK(first_bucket_cap_mb >= 0 && std::isfinite(first_bucket_cap_mb),
           "first_bucket_cap_mb must be >= 0, got ", first_bucket_cap_mb);
  const auto bytes = [](double mb) { return static_cast<int64_t>(mb * 1024 * 1024); };
  const int64_t cap = bytes(bucket_cap_mb);
  return {std::min(bytes(first_bucket_cap_mb), cap), cap};
}

}  // namespace ringflow::comm
