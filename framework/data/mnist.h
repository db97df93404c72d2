// MNIST and Fashion-MNIST (same IDX format and file names) over the IDX reader (idx.h):
// images (N, 28, 28) become examples of shape (1, 28, 28), f32 in [0, 1].
// Debian's dataset-fashion-mnist installs the gzip-compressed files in kFashionMnistDir.
#pragma once

#include <memory>
#include <string>

#include "ringflow/framework/data/dataset.h"

namespace ringflow::data {

struct IdxDataset;

inline const char* const kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

class Mnist : public ByteImageDataset {
 public:
  // Reads an image file ((N, H, W) or (N, C, H, W) bytes) and a label file ((N) bytes, each
  // below num_classes). Errors are read_idx_pair's: they name the file and the problem.
  Mnist(const std::string& images_path, const std::string& labels_path, int64_t num_classes = 10);

  // train-images-idx3-ubyte / train-labels-idx1-ubyte (or t10k-*) in dir, each with or
  // without ".gz" (the first that exists; an error naming both when neither does).
  static std::shared_ptr<Mnist> open(const std::string& dir, bool train);

 private:
  Mnist(IdxDataset&& set, int64_t num_classes, const std::string& images_path);
};

}  // namespace ringflow::data
