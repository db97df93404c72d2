#include "ringflow/framework/data/dataset.h"

#include "ringflow/framework/data/iterable_dataset.h"

#include <algorithm>

#include "ringflow/framework/ops.h"

namespace ringflow::data {

int64_t Dataset::read(int64_t i, float* dst, Generator&) const { return read(i, dst); }

int64_t Dataset::label(int64_t i) const {
  std::vector<float> scratch(static_cast<size_t>(image_numel()));
  return read(i, scratch.data());
}

int64_t IterableDataset::read(int64_t, float*) const {
  throw std::invalid_argument("a streamed data set (IterableDataset) is read in its stream's order by a "
                              "DataLoader, not example by example");
}

Example Dataset::get(int64_t i) const {
  RF_CHECK(i >= 0 && i < size(), "dataset: index ", i, " out of range [0, ", size(), ")");
  Tensor image = empty(image_shape(), DType::f32);
  const int64_t label = read(i, image.data<float>());
  return {image, label};
}

ByteImageDataset::ByteImageDataset(std::vector<uint8_t> pixels, std::vector<uint8_t> labels,
                                   Shape image_shape, int64_t num_classes)
    : pixels_(std::move(pixels)), labels_(std::move(labels)), image_shape_(std::move(image_shape)),
      num_classes_(num_classes) {
  RF_CHECK(num_classes >= 1 && num_classes <= 256, "ByteImageDataset: num_classes must be 1..256, got ",
           num_classes);
  RF_CHECK(static_cast<int64_t>(pixels_.size()) == size() * shape_numel(image_shape_),
           "ByteImageDataset: ", pixels_.size(), " pixel bytes for ", size(), " images of shape ",
           shape_str(image_shape_));
  for (size_t i = 0; i < labels_.size(); ++i)
    RF_CHECK(labels_[i] < num_classes, "ByteImageDataset: label ", int(labels_[i]), " of example ", i,
             " is not below ", num_classes, " classes");
}

int64_t ByteImageDataset::read(int64_t i, float* dst) const {
  const int64_t n = shape_numel(image_shape_);
  const uint8_t* src = pixels_.data() + i * n;
  for (int64_t j = 0; j < n; ++j) dst[j] = static_cast<float>(src[j]) / 255.0f;
  return labels_[static_cast<size_t>(i)];
}

Subset::Subset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices)
    : base_(std::move(base)), indices_(std::move(indices)) {
  RF_CHECK(base_ != nullptr, "Subset: null dataset");
  for (int64_t i : indices_)
    RF_CHECK(i >= 0 && i < base_->size(), "Subset: index ", i, " out of range [0, ", base_->size(), ")");
}

std::shared_ptr<Subset> Subset::first(std::shared_ptr<const Dataset> base, int64_t n) {
  RF_CHECK(base != nullptr, "Subset: null dataset");
  std::vector<int64_t> indices(static_cast<size_t>(std::clamp<int64_t>(n, 0, base->size())));
  for (size_t i = 0; i < indices.size(); ++i) indices[i] = static_cast<int64_t>(i);
  return std::make_shared<Subset>(std::move(base), std::move(indices));
}

int64_t Subset::read(int64_t i, float* dst) const { return base_->read(indices_[static_cast<size_t>(i)], dst); }

int64_t Subset::read(int64_t i, float* dst, Generator& gen) const {
  return base_->read(indices_[static_cast<size_t>(i)], dst, gen);
}

}  // namespace ringflow::data
