// The convolution layers of a registered model (bench/kernels --device cuda times each), taken
// from the model itself: one forward pass at batch 1 on the CPU records every conv2d the
// kernel table runs (input, weight, stride, padding, dilation, bias), then N is the batch.
// Nothing is typed in by hand, so the list follows the model's definition.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ringflow/framework/ringflow.h"

namespace ringflow::bench {

struct ConvLayer {
  Shape x, w, y;  // (N, C, H, W), (K, C, R, S), (N, K, P, Q)
  Conv2dParams params;
  bool bias = false;
  int count = 1;  // layers of the model with this shape (distinct_layers)

  // Multiply-adds of one forward call, in GFLOP (2 per multiply-add).
  double gflop() const;
  // "N256 64x32x32 -> 128 3x3 s2 p1 +bias"
  std::string name() const;
  // Everything but count.
  bool same_shape(const ConvLayer& o) const;
};

// Every convolution of `model` (a models/registry.h name) in the order its forward calls them,
// at batch `batch`.
std::vector<ConvLayer> conv_layers(const std::string& model, int64_t batch);
// Layers with the same shape as one entry (first appearance), `count` saying how many.
std::vector<ConvLayer> distinct_layers(const std::vector<ConvLayer>& layers);

}  // namespace ringflow::bench
