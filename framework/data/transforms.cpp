#include "ringflow/framework/data/transforms.h"

#include <algorithm>
#include <cstring>

namespace ringflow::data {
namespace {

void check_chw(const Shape& shape, const char* who) {
  RF_CHECK(shape.size() == 3, who, ": expected an image (C, H, W), got shape ", shape_str(shape));
}

}  // namespace

int64_t uniform_int(Generator& gen, int64_t n) {
  RF_CHECK(n >= 1, "uniform_int: n must be positive, got ", n);
  const unsigned __int128 wide = static_cast<unsigned __int128>(gen.next_u64()) * static_cast<uint64_t>(n);
  return static_cast<int64_t>(wide >> 64);
}

Normalize::Normalize(std::vector<float> mean, std::vector<float> std)
    : mean_(std::move(mean)), std_(std::move(std)) {
  RF_CHECK(!mean_.empty() && mean_.size() == std_.size(), "Normalize: ", mean_.size(), " means and ",
           std_.size(), " standard deviations");
  for (float s : std_) RF_CHECK(s > 0, "Normalize: standard deviation ", s, " is not positive");
}

void Normalize::apply(float* image, const Shape& shape, Generator&) const {
  check_chw(shape, "Normalize");
  const int64_t channels = shape[0], plane = shape[1] * shape[2];
  RF_CHECK(mean_.size() == 1 || static_cast<int64_t>(mean_.size()) == channels, "Normalize: ",
           mean_.size(), " means for an image of ", channels, " channels");
  for (int64_t c = 0; c < channels; ++c) {
    const size_t k = mean_.size() == 1 ? 0 : static_cast<size_t>(c);
    const float m = mean_[k], s = std_[k];
    float* p = image + c * plane;
    for (int64_t i = 0; i < plane; ++i) p[i] = (p[i] - m) / s;
  }
}

RandomCrop::RandomCrop(int64_t padding) : padding_(padding) {
  RF_CHECK(padding >= 0, "RandomCrop: negative padding ", padding);
}

void RandomCrop::apply(float* image, const Shape& shape, Generator& gen) const {
  check_chw(shape, "RandomCrop");
  const int64_t channels = shape[0], h = shape[1], w = shape[2], pad = padding_;
  // Offsets of the window in the padded image, then as a shift of the original.
  const int64_t top = uniform_int(gen, 2 * pad + 1) - pad;
  const int64_t left = uniform_int(gen, 2 * pad + 1) - pad;
  if (top == 0 && left == 0) return;
  thread_local std::vector<float> scratch;
  scratch.assign(image, image + channels * h * w);
  // out[y][x] = in[y + top][x + left], zero outside.
  const int64_t x0 = std::clamp<int64_t>(-left, 0, w), x1 = std::clamp<int64_t>(w - left, 0, w);
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t y = 0; y < h; ++y) {
      float* out = image + (c * h + y) * w;
      const int64_t sy = y + top;
      if (sy < 0 || sy >= h || x0 >= x1) {
        std::fill(out, out + w, 0.0f);
        continue;
      }
      const float* in = scratch.data() + (c * h + sy) * w;
      std::fill(out, out + x0, 0.0f);
      std::memcpy(out + x0, in + x0 + left, static_cast<size_t>(x1 - x0) * sizeof(float));
      std::fill(out + x1, out + w, 0.0f);
    }
}

RandomHorizontalFlip::RandomHorizontalFlip(double p) : p_(p) {
  RF_CHECK(p >= 0 && p <= 1, "RandomHorizontalFlip: probability ", p, " outside [0, 1]");
}

void RandomHorizontalFlip::apply(float* image, const Shape& shape, Generator& gen) const {
  check_chw(shape, "RandomHorizontalFlip");
  if (!(gen.uniform() < p_)) return;
  const int64_t rows = shape[0] * shape[1], w = shape[2];
  for (int64_t r = 0; r < rows; ++r) std::reverse(image + r * w, image + (r + 1) * w);
}

}  // namespace ringflow::data
