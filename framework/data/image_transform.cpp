#include "ringflow/framework/data/image_transform.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "ringflow/framework/data/transforms.h"

namespace ringflow::data {
namespace {

// Python's round(): halves to even (torchvision rounds crop sizes and offsets with it).
int round_half_even(double x) { return static_cast<int>(std::nearbyint(x)); }

double uniform(Generator& gen, double a, double b) { return a + (b - a) * gen.uniform(); }

struct Box {
  int top, left, height, width;
};

// torchvision's RandomResizedCrop.get_params: ten tries at a random area and aspect ratio,
// then the whole image cut to the nearest allowed ratio, centred.
Box random_resized_crop_box(int width, int height, const RandomResizedCropOptions& o, Generator& gen) {
  const double area = double(width) * height;
  const double log_r0 = std::log(o.ratio[0]), log_r1 = std::log(o.ratio[1]);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * uniform(gen, o.scale[0], o.scale[1]);
    const double aspect = std::exp(uniform(gen, log_r0, log_r1));
    const int w = round_half_even(std::sqrt(target * aspect));
    const int h = round_half_even(std::sqrt(target / aspect));
    if (0 < w && w <= width && 0 < h && h <= height) {
      const int top = static_cast<int>(uniform_int(gen, height - h + 1));
      const int left = static_cast<int>(uniform_int(gen, width - w + 1));
      return {top, left, h, w};
    }
  }
  const double in_ratio = double(width) / height;
  int w = width, h = height;
  if (in_ratio < std::min(o.ratio[0], o.ratio[1])) {
    h = round_half_even(w / std::min(o.ratio[0], o.ratio[1]));
  } else if (in_ratio > std::max(o.ratio[0], o.ratio[1])) {
    w = round_half_even(h * std::max(o.ratio[0], o.ratio[1]));
  }
  return {(height - h) / 2, (width - w) / 2, h, w};
}

// torchvision's Resize output size: the shorter side to size, the longer truncated.
std::array<int, 2> resized_size(int width, int height, const ResizeOptions& o) {
  if (o.size == 0) return {o.width, o.height};
  if (width <= height) return {o.size, static_cast<int>(int64_t{o.size} * height / width)};
  return {static_cast<int>(int64_t{o.size} * width / height), o.size};
}

// torchvision's CenterCrop offset along one side: centred, rounded half to even; a crop larger
// than the image pads it with zeros, the extra pixel at the far end.
int center_offset(int image, int crop) {
  if (crop > image) return -((crop - image) / 2);
  return round_half_even((image - crop) / 2.0);
}

// PIL's resampling taps (Resample.c precompute_coeffs, the bilinear filter widened by the
// scale when shrinking) for output index `out` of `out_size` over [in0, in1) of an axis of
// in_size pixels, in fixed point with 22 fractional bits as its 8-bit path rounds them.
constexpr int kPrecisionBits = 32 - 8 - 2;

struct Taps {
  int first = 0;  // pixel index along the axis, in the clipped axis' coordinates
  int count = 0;  // 0: the output pixel is padding
  size_t offset = 0;  // of its weights in the axis' weight list
};

// Appends output index `out`'s weights to `weights`.
Taps compute_taps(int in_size, double in0, double in1, int out_size, int out, std::vector<int32_t>& weights) {
  const double scale = (in1 - in0) / out_size;
  const double filter_scale = std::max(scale, 1.0);
  const double support = filter_scale;  // bilinear: support 1
  const double center = in0 + (out + 0.5) * scale;
  const double ss = 1.0 / filter_scale;
  const int lo = std::max(0, static_cast<int>(center - support + 0.5));
  const int hi = std::min(in_size, static_cast<int>(center + support + 0.5));
  Taps t{lo, std::max(0, hi - lo), weights.size()};
  thread_local std::vector<double> w;
  w.resize(static_cast<size_t>(t.count));
  double sum = 0;
  for (int k = 0; k < t.count; ++k) {
    const double x = std::abs((k + lo - center + 0.5) * ss);
    w[k] = x < 1.0 ? 1.0 - x : 0.0;
    sum += w[k];
  }
  for (int k = 0; k < t.count; ++k) {
    const double v = (sum != 0.0 ? w[k] / sum : w[k]) * (1 << kPrecisionBits);
    weights.push_back(static_cast<int32_t>(v < 0 ? v - 0.5 : v + 0.5));
  }
  return t;
}

uint8_t clip8(int32_t v) {
  if (v >= (1 << kPrecisionBits << 8)) return 255;
  if (v <= 0) return 0;
  return static_cast<uint8_t>(v >> kPrecisionBits);
}

// Every output's taps widened to the axis' largest count K, zero weights added (the sums
// stay the same), K weights per output in `padded`: a loop of fixed length, unrolled,
// without the mispredicted branches of a varying one. Returns K.
int pad_taps(std::vector<Taps>& taps, const std::vector<int32_t>& weights, int in_size,
             std::vector<int32_t>& padded) {
  int k_max = 0;
  for (const Taps& t : taps) k_max = std::max(k_max, t.count);
  padded.assign(taps.size() * static_cast<size_t>(k_max), 0);
  for (size_t x = 0; x < taps.size(); ++x) {
    Taps& t = taps[x];
    if (t.count == 0) continue;
    const int first = std::min(t.first, in_size - k_max);
    for (int k = 0; k < t.count; ++k) padded[x * k_max + (t.first - first + k)] = weights[t.offset + k];
    t.first = first;
  }
  return k_max;
}

// One source row through the horizontal taps (K per output, from pad_taps), rounded to 8
// bits. K = 0: the count known only at run time (k_run).
template <int K>
void horizontal_row(const uint8_t* src, const std::vector<Taps>& cols, const int32_t* w, int k_run, uint8_t* out) {
  const int k_count = K > 0 ? K : k_run;
  for (size_t x = 0; x < cols.size(); ++x, w += k_count, out += 3) {
    if (cols[x].count == 0) continue;
    const uint8_t* in = src + static_cast<size_t>(cols[x].first) * 3;
    int32_t s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
    for (int k = 0; k < k_count; ++k) {
      s0 += in[3 * k] * w[k];
      s1 += in[3 * k + 1] * w[k];
      s2 += in[3 * k + 2] * w[k];
    }
    out[0] = clip8(s0);
    out[1] = clip8(s1);
    out[2] = clip8(s2);
  }
}

using HorizontalRow = void (*)(const uint8_t*, const std::vector<Taps>&, const int32_t*, int, uint8_t*);

HorizontalRow horizontal_row_for(int k) {
  static const HorizontalRow fixed[] = {horizontal_row<0>, horizontal_row<1>, horizontal_row<2>,
                                        horizontal_row<3>, horizontal_row<4>, horizontal_row<5>,
                                        horizontal_row<6>, horizontal_row<7>, horizontal_row<8>};
  return k <= 8 ? fixed[k] : horizontal_row<0>;
}

}  // namespace

CropPlan CropPlan::reduced(int reduction, int width, int height) const {
  CropPlan p = *this;
  const double r = reduction;
  p.x0 = x0 / r;
  p.x1 = x1 / r;
  p.y0 = y0 / r;
  p.y1 = y1 / r;
  p.clip_x0 = static_cast<int>(std::floor(clip_x0 / r));
  p.clip_y0 = static_cast<int>(std::floor(clip_y0 / r));
  p.clip_x1 = std::min(width, static_cast<int>(std::ceil(clip_x1 / r)));
  p.clip_y1 = std::min(height, static_cast<int>(std::ceil(clip_y1 / r)));
  return p;
}

ImageTransform::ImageTransform(ImageTransformOptions options) : options_(std::move(options)) {
  const ImageTransformOptions& o = options_;
  RF_CHECK(!(o.random_resized_crop && o.resize), "image transform: RandomResizedCrop and Resize exclude each other");
  RF_CHECK(!(o.center_crop > 0 && o.random_crop), "image transform: CenterCrop and RandomCrop exclude each other");
  if (o.random_resized_crop) {
    const auto& r = *o.random_resized_crop;
    RF_CHECK(r.size > 0, "RandomResizedCrop: size must be positive, got ", r.size);
    RF_CHECK(0 < r.scale[0] && r.scale[0] <= r.scale[1] && r.scale[1] <= 1, "RandomResizedCrop: scale (",
             r.scale[0], ", ", r.scale[1], ") must satisfy 0 < min <= max <= 1");
    RF_CHECK(0 < r.ratio[0] && r.ratio[0] <= r.ratio[1], "RandomResizedCrop: ratio (", r.ratio[0], ", ",
             r.ratio[1], ") must satisfy 0 < min <= max");
    width_ = height_ = r.size;
  }
  if (o.resize) {
    RF_CHECK(o.resize->size > 0 || (o.resize->width > 0 && o.resize->height > 0),
             "Resize: give the shorter side or both sides, positive");
    if (o.resize->size == 0) {
      width_ = o.resize->width;
      height_ = o.resize->height;
    }
  }
  if (o.center_crop > 0) width_ = height_ = o.center_crop;
  if (o.random_crop) {
    RF_CHECK(o.random_crop->size > 0 && o.random_crop->padding >= 0, "RandomCrop: size ", o.random_crop->size,
             " and padding ", o.random_crop->padding, " must be positive and >= 0");
    width_ = height_ = o.random_crop->size;
  }
  RF_CHECK(width_ > 0, "image transform: the output's size depends on each image's; end with RandomResizedCrop, "
           "Resize((h, w)), CenterCrop or RandomCrop");
  RF_CHECK(o.horizontal_flip >= 0 && o.horizontal_flip <= 1, "RandomHorizontalFlip: p ", o.horizontal_flip,
           " outside [0, 1]");
  for (int c = 0; c < 3; ++c) {
    RF_CHECK(o.std[c] > 0, "Normalize: standard deviation ", o.std[c], " is not positive");
    for (int v = 0; v < 256; ++v) normalized_[c][v] = (static_cast<float>(v) / 255.0f - o.mean[c]) / o.std[c];
  }
}

ImageTransform ImageTransform::preset(const std::string& name, bool train, int size) {
  RF_CHECK(size > 0, "image transform: size must be positive, got ", size);
  ImageTransformOptions o;
  if (name == "imagenet") {
    if (train) {
      o.random_resized_crop = RandomResizedCropOptions{.size = size};
      o.horizontal_flip = 0.5;
    } else {
      o.resize = ResizeOptions{.size = size * 256 / 224};
      o.center_crop = size;
    }
    o.mean = {0.485f, 0.456f, 0.406f};
    o.std = {0.229f, 0.224f, 0.225f};
  } else if (name == "cifar") {
    o.resize = ResizeOptions{.height = size, .width = size};
    if (train) {
      o.random_crop = RandomCropOptions{.size = size, .padding = 4};
      o.horizontal_flip = 0.5;
    }
    o.mean = {0.4914f, 0.4822f, 0.4465f};
    o.std = {0.2470f, 0.2435f, 0.2616f};
  } else {
    throw std::invalid_argument("unknown image transform '" + name + "' (choices: imagenet, cifar)");
  }
  return ImageTransform(o);
}

CropPlan ImageTransform::plan(int width, int height, Generator& gen) const {
  const ImageTransformOptions& o = options_;
  CropPlan p;
  int region_w = width, region_h = height;
  if (o.random_resized_crop) {
    const Box b = random_resized_crop_box(width, height, *o.random_resized_crop, gen);
    p.x0 = p.clip_x0 = b.left;
    p.y0 = p.clip_y0 = b.top;
    region_w = b.width;
    region_h = b.height;
    p.resized_width = p.resized_height = o.random_resized_crop->size;
  } else if (o.resize) {
    const auto [w, h] = resized_size(width, height, *o.resize);
    p.resized_width = w;
    p.resized_height = h;
  } else {
    p.resized_width = width;
    p.resized_height = height;
  }
  p.x1 = p.clip_x1 = p.clip_x0 + region_w;
  p.y1 = p.clip_y1 = p.clip_y0 + region_h;
  p.width = width_;
  p.height = height_;
  if (o.center_crop > 0) {
    p.left = center_offset(p.resized_width, o.center_crop);
    p.top = center_offset(p.resized_height, o.center_crop);
  } else if (o.random_crop) {  // RandomCrop.get_params on the padded image: top, then left
    const int pad = o.random_crop->padding, size = o.random_crop->size;
    const int padded_w = p.resized_width + 2 * pad, padded_h = p.resized_height + 2 * pad;
    RF_CHECK(padded_w >= size && padded_h >= size, "RandomCrop: ", size, "x", size, " is larger than the ",
             padded_w, "x", padded_h, " padded image");
    const int top = padded_h == size ? 0 : static_cast<int>(uniform_int(gen, padded_h - size + 1));
    const int left = padded_w == size ? 0 : static_cast<int>(uniform_int(gen, padded_w - size + 1));
    p.top = top - pad;
    p.left = left - pad;
  }
  if (o.horizontal_flip > 0) p.flip = gen.uniform() < o.horizontal_flip;
  return p;
}

int ImageTransform::reduction(const CropPlan& p) {
  for (int r : {8, 4, 2})
    if ((p.x1 - p.x0) / r >= p.resized_width && (p.y1 - p.y0) / r >= p.resized_height) return r;
  return 1;
}

void ImageTransform::apply(const DecodedImage& image, const CropPlan& p, float* dst) const {
  RF_CHECK(p.width == width_ && p.height == height_, "image transform: a plan for ", p.width, "x", p.height,
           " output, not ", width_, "x", height_);
  RF_CHECK(image.x0 <= p.clip_x0 && p.clip_x0 < p.clip_x1 && p.clip_x1 <= image.x0 + image.width &&
               image.y0 <= p.clip_y0 && p.clip_y0 < p.clip_y1 && p.clip_y1 <= image.y0 + image.height,
           "image transform: the plan's region is outside the ", image.width, "x", image.height, " pixels at (",
           image.x0, ", ", image.y0, ")");
  const int W = width_, H = height_;
  const int clip_w = p.clip_x1 - p.clip_x0, clip_h = p.clip_y1 - p.clip_y0;
  // Taps of each output column and row inside the resized image (count 0: padding).
  thread_local std::vector<Taps> cols, rows;
  thread_local std::vector<int32_t> col_weights, row_weights;
  cols.assign(static_cast<size_t>(W), Taps{});
  rows.assign(static_cast<size_t>(H), Taps{});
  col_weights.clear();
  row_weights.clear();
  int row_lo = clip_h, row_hi = 0;
  for (int x = 0; x < W; ++x) {
    const int rx = p.left + x;
    if (rx >= 0 && rx < p.resized_width)
      cols[x] = compute_taps(clip_w, p.x0 - p.clip_x0, p.x1 - p.clip_x0, p.resized_width, rx, col_weights);
  }
  for (int y = 0; y < H; ++y) {
    const int ry = p.top + y;
    if (ry < 0 || ry >= p.resized_height) continue;
    rows[y] = compute_taps(clip_h, p.y0 - p.clip_y0, p.y1 - p.clip_y0, p.resized_height, ry, row_weights);
    row_lo = std::min(row_lo, rows[y].first);
    row_hi = std::max(row_hi, rows[y].first + rows[y].count);
  }
  // Horizontal pass over the source rows that the vertical one reads, rounded to 8 bits as PIL does.
  thread_local std::vector<int32_t> padded;
  const int k = pad_taps(cols, col_weights, clip_w, padded);
  const HorizontalRow row_pass = horizontal_row_for(k);
  thread_local std::vector<uint8_t> temp;
  temp.assign(static_cast<size_t>(std::max(0, row_hi - row_lo)) * W * 3, 0);
  const size_t stride = static_cast<size_t>(image.width) * 3;
  for (int r = row_lo; r < row_hi; ++r)
    row_pass(image.rgb.data() + static_cast<size_t>(p.clip_y0 - image.y0 + r) * stride +
                 size_t(p.clip_x0 - image.x0) * 3,
             cols,
             padded.data(), k, temp.data() + static_cast<size_t>(r - row_lo) * W * 3);
  // Vertical pass a row at a time (each tap adds a whole row: vectorised), rounded to 8 bits,
  // then ToTensor + Normalize by table into the planes (mirrored for a flip).
  const size_t plane = static_cast<size_t>(W) * H, row_values = static_cast<size_t>(W) * 3;
  thread_local std::vector<int32_t> sums;
  sums.resize(row_values);
  for (int y = 0; y < H; ++y) {
    const Taps& ty = rows[y];
    float* out = dst + static_cast<size_t>(y) * W;
    std::fill(sums.begin(), sums.end(), 1 << (kPrecisionBits - 1));
    const int32_t* w = row_weights.data() + ty.offset;
    for (int k = 0; k < ty.count; ++k) {
      const uint8_t* in = temp.data() + static_cast<size_t>(ty.first - row_lo + k) * row_values;
      const int32_t wk = w[k];
      int32_t* acc = sums.data();
      for (size_t i = 0; i < row_values; ++i) acc[i] += in[i] * wk;
    }
    for (int x = 0; x < W; ++x) {
      const int col = p.flip ? W - 1 - x : x;
      const bool inside = ty.count > 0 && cols[x].count > 0;  // else padding: 0
      for (int c = 0; c < 3; ++c) out[c * plane + col] = normalized_[c][inside ? clip8(sums[x * 3 + c]) : 0];
    }
  }
}

}  // namespace ringflow::data
