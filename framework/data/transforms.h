// Per-example transforms applied by the DataLoader to each image in the batch's memory, in
// place: normalize, random crop with zero padding, random horizontal flip (the usual CIFAR
// augmentation). Random transforms draw from the example's own Generator, which the loader
// derives from (seed, epoch, position in the epoch), so results do not depend on the
// number of worker threads or on prefetching. Transforms keep the image's shape.
#pragma once

#include <vector>

#include "ringflow/framework/random.h"
#include "ringflow/framework/tensor.h"

namespace ringflow::data {

class Transform {
 public:
  virtual ~Transform() = default;
  // image: shape (C, H, W), contiguous f32, transformed in place. Thread-safe (const).
  virtual void apply(float* image, const Shape& shape, Generator& gen) const = 0;
};

// x = (x - mean[c]) / std[c] per channel c (one value each: every channel), divided as
// torchvision's Normalize does (not multiplied by 1 / std), so values match it exactly.
class Normalize : public Transform {
 public:
  Normalize(std::vector<float> mean, std::vector<float> std);
  void apply(float* image, const Shape& shape, Generator& gen) const override;

 private:
  std::vector<float> mean_, std_;
};

// Pads each side with `padding` zeros and crops a window of the original size at a uniform
// offset (top drawn first, then left): torchvision's RandomCrop(size=H, padding=padding).
class RandomCrop : public Transform {
 public:
  explicit RandomCrop(int64_t padding);
  void apply(float* image, const Shape& shape, Generator& gen) const override;

 private:
  int64_t padding_;
};

// Mirrors the image left-right with probability p (one uniform draw per image).
class RandomHorizontalFlip : public Transform {
 public:
  explicit RandomHorizontalFlip(double p = 0.5);
  void apply(float* image, const Shape& shape, Generator& gen) const override;

 private:
  double p_;
};

// An integer uniform in [0, n), n >= 1 (Lemire's multiply-shift; bias below 2^-40 for the
// sizes used here).
int64_t uniform_int(Generator& gen, int64_t n);

}  // namespace ringflow::data
