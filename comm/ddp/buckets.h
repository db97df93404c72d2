// Bucket assignment for the DDP reducer (comm/ddp/reducer.h): which gradients are reduced
// together, as one flat buffer and one collective. A pure function of sizes, dtypes and an
// order, so that it is tested alone and every rank computes the same assignment.
//
// Policy (PyTorch's compute_bucket_assignment_by_size, with one difference):
//  - tensors are visited in `order` (the reducer passes reverse registration order at first,
//    then the order in which gradients became ready in the first backward);
//  - a bucket holds one dtype; each dtype has its own open bucket;
//  - a bucket holds at most its cap in bytes: a tensor that would take it over the cap closes
//    it and opens the next (PyTorch closes a bucket once it *reaches* the cap, so its buckets
//    overshoot by up to one tensor; "up to bucket_cap_mb" is taken literally here). A tensor
//    larger than the cap gets a bucket of its own;
//  - caps[0] applies to a dtype's first bucket, caps[1] to its second, ..., the last cap to
//    every later one (DDP passes {1 MiB, bucket_cap}: a small first bucket starts
//    communication early in backward);
//  - buckets are returned ordered by the position in `order` of their first tensor, which
//    is the order the reducer launches them in.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "ringflow/kernels/dtype.h"

namespace ringflow::comm {

struct BucketTensor {
  int64_t bytes = 0;
  DType dtype = DType::f32;
};

// Returns, per bucket, the indices (into `tensors`) of its tensors in visiting order.
// `order` must be a permutation of 0..tensors.size()-1; `caps` (bytes) non-empty. Throws
// std::invalid_argument otherwise.
std::vector<std::vector<size_t>> assign_buckets(const std::vector<BucketTensor>& tensors,
                                                const std::vector<size_t>& order,
                                                const std::vector<int64_t>& caps);

// {first bucket cap, cap} in bytes from MiB (1 MiB = 2^20 bytes, as PyTorch's bucket_cap_mb);
// the first cap is never above the cap (cap 0: one bucket per tensor).
std::vector<int64_t> bucket_caps(double first_bucket_cap_mb, double bucket_cap_mb);

}  // namespace ringflow::comm
