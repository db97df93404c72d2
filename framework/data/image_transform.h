// torchvision's transforms of PIL images (RandomResizedCrop, Resize, CenterCrop, RandomCrop,
// RandomHorizontalFlip, then ToTensor and Normalize), applied to a decoded RGB image in one
// pass that writes the network's input: f32, (3, H, W), normalised.
//
// Two steps. plan() draws the random parameters as torchvision does (with ringflow's
// Generator, so the same rule, not the same numbers) from the image's size alone, before it is
// decoded: a JPEG can then be decoded at 1/2, 1/4 or 1/8 of its size where the region it is
// cut to stays at least as large as the output (reduction()). apply() resamples the region as
// PIL's Image.resize with its BILINEAR filter does, antialiased and in the same fixed-point
// arithmetic with 8-bit rounding between the horizontal and the vertical pass, so that a
// full-size decode gives PIL's pixels; values become (v / 255 - mean) / std, in f32 as
// ToTensor and Normalize compute them.
#pragma once

#include <array>
#include <optional>
#include <string>

#include "ringflow/framework/data/image_decoder.h"
#include "ringflow/framework/random.h"

namespace ringflow::data {

// Parameters with torchvision's names and defaults.
struct RandomResizedCropOptions {
  int size = 224;
  std::array<double, 2> scale{0.08, 1.0};
  std::array<double, 2> ratio{3.0 / 4.0, 4.0 / 3.0};
};
struct ResizeOptions {
  int size = 0;               // the shorter side, the aspect kept (torchvision's Resize(int)) ...
  int height = 0, width = 0;  // ... or both sides (Resize((h, w))) when size is 0
};
struct RandomCropOptions {
  int size = 32;
  int padding = 0;  // zeros on every side first
};

// The steps, applied in this order: RandomResizedCrop or Resize, then CenterCrop or
// RandomCrop, then RandomHorizontalFlip, ToTensor, Normalize. The output must have one size
// whatever the image's: the last of RandomResizedCrop, Resize((h, w)), CenterCrop and
// RandomCrop gives it.
struct ImageTransformOptions {
  std::optional<RandomResizedCropOptions> random_resized_crop = {};
  std::optional<ResizeOptions> resize = {};
  int center_crop = 0;  // 0: none
  std::optional<RandomCropOptions> random_crop = {};
  double horizontal_flip = 0;  // RandomHorizontalFlip(p); 0: none
  std::array<float, 3> mean{0, 0, 0}, std{1, 1, 1};  // Normalize, after ToTensor's / 255
};

// Where the output comes from, in the pixels of the image it is applied to.
struct CropPlan {
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;  // the region resampled (PIL's resize box)
  int clip_x0 = 0, clip_y0 = 0, clip_x1 = 0, clip_y1 = 0;  // pixels resampling may read
  int resized_width = 0, resized_height = 0;  // the region resized to this
  int left = 0, top = 0;  // the output's origin in the resized image (negative: zero padding)
  int width = 0, height = 0;  // the output's size
  bool flip = false;
  // The same plan for the image decoded at 1/reduction of its size (width x height).
  CropPlan reduced(int reduction, int width, int height) const;
};

class ImageTransform {
 public:
  explicit ImageTransform(ImageTransformOptions options);
  // torchvision's reference recipes at `size` (224 for ImageNet, 32 for CIFAR-10):
  //   imagenet train: RandomResizedCrop(size), RandomHorizontalFlip(), Normalize(ImageNet)
  //   imagenet val:   Resize(size * 256 / 224), CenterCrop(size), Normalize(ImageNet)
  //   cifar train:    Resize((size, size)), RandomCrop(size, padding=4), RandomHorizontalFlip(),
  //                   Normalize(CIFAR-10)   (the Resize does nothing to size x size images)
  //   cifar val:      Resize((size, size)), Normalize(CIFAR-10)
  // Throws std::invalid_argument naming the choices for another name.
  static ImageTransform preset(const std::string& name, bool train, int size);

  int width() const { return width_; }
  int height() const { return height_; }
  const ImageTransformOptions& options() const { return options_; }

  // The random parameters for an image of width x height pixels.
  CropPlan plan(int width, int height, Generator& gen) const;
  // The largest JPEG reduction (1, 2, 4, 8) that leaves the region at least as large as it
  // is resized to: then resampling still only shrinks, and decoding costs up to 64x less.
  static int reduction(const CropPlan& plan);
  // dst: (3, height(), width()) f32. plan: for this image's size (reduced() when it was
  // decoded reduced); image may hold just the plan's clip region (DecodedImage::x0, y0).
  void apply(const DecodedImage& image, const CropPlan& plan, float* dst) const;

 private:
  ImageTransformOptions options_;
  int width_ = 0, height_ = 0;
  std::array<std::array<float, 256>, 3> normalized_;  // Normalize(ToTensor(v)) per channel
};

}  // namespace ringflow::data
