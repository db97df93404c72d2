// Dataset: a random-access set of labelled images, read straight into a batch.
//
// Speed: a DataLoader collates a batch by asking each example to write its image (f32, in
// the batch's memory) with read(i, dst): one copy or one u8 -> f32 conversion loop per
// example, no per-element tensor ops and no temporary tensors. Implementations hold their
// data in memory and read() is const and safe to call from several threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "ringflow/framework/random.h"
#include "ringflow/framework/tensor.h"

namespace ringflow::data {

// One example that cannot be read (a corrupt or unreadable file), with a message naming it: a
// loader told to skip bad examples drops it and goes on; any other error stops the epoch.
class BadExample : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Example {
  Tensor image;   // image_shape(), f32
  int64_t label;  // in [0, num_classes())
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Shape image_shape() const = 0;  // of every example, e.g. (3, 32, 32)
  virtual int64_t num_classes() const = 0;
  // Writes example i's image (image_shape(), contiguous f32) to dst and returns its label.
  // i in [0, size()); thread-safe.
  virtual int64_t read(int64_t i, float* dst) const = 0;
  // The same for data sets whose reading is itself random (a random crop taken while the
  // file is decoded): they draw from gen, the example's own generator (data_loader.h); the
  // default ignores it.
  virtual int64_t read(int64_t i, float* dst, Generator& gen) const;

  // Example i's label; by default read() into scratch memory (data sets that hold their
  // labels apart answer without touching the image).
  virtual int64_t label(int64_t i) const;

  // One example as a fresh tensor (for inspection; loaders use read()).
  Example get(int64_t i) const;
  int64_t image_numel() const { return shape_numel(image_shape()); }
};

// Images stored as bytes (N, C, H, W) with byte labels, read as f32 in [0, 1] (value / 255,
// as torchvision's ToTensor): the in-memory form of the CIFAR-10 and MNIST readers.
class ByteImageDataset : public Dataset {
 public:
  // pixels: size * shape_numel(image_shape) bytes; labels: size bytes, each < num_classes.
  ByteImageDataset(std::vector<uint8_t> pixels, std::vector<uint8_t> labels, Shape image_shape,
                   int64_t num_classes);
  int64_t size() const override { return static_cast<int64_t>(labels_.size()); }
  Shape image_shape() const override { return image_shape_; }
  int64_t num_classes() const override { return num_classes_; }
  int64_t read(int64_t i, float* dst) const override;
  int64_t label(int64_t i) const override { return labels_[static_cast<size_t>(i)]; }
  const std::vector<uint8_t>& pixels() const { return pixels_; }
  const std::vector<uint8_t>& labels() const { return labels_; }

 private:
  std::vector<uint8_t> pixels_, labels_;
  Shape image_shape_;
  int64_t num_classes_;
};

// The examples of `base` at `indices` (e.g. a short run on the first n examples).
class Subset : public Dataset {
 public:
  Subset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices);
  // The first n examples (all when n >= base->size()).
  static std::shared_ptr<Subset> first(std::shared_ptr<const Dataset> base, int64_t n);
  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  Shape image_shape() const override { return base_->image_shape(); }
  int64_t num_classes() const override { return base_->num_classes(); }
  int64_t read(int64_t i, float* dst) const override;
  int64_t read(int64_t i, float* dst, Generator& gen) const override;
  int64_t label(int64_t i) const override { return base_->label(indices_[static_cast<size_t>(i)]); }

 private:
  std::shared_ptr<const Dataset> base_;
  std::vector<int64_t> indices_;
};

}  // namespace ringflow::data
