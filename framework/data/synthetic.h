// A synthetic data set of any image shape for benchmarks: seeded normal f32 images and
// uniform labels, the same on every machine for a given seed. To keep memory bounded for
// large sizes, it holds `distinct` examples and example i is example i % distinct (so a
// batch is still one memcpy per example, as with a real in-memory data set).
#pragma once

#include <cstdint>
#include <vector>

#include "ringflow/framework/data/dataset.h"

namespace ringflow::data {

struct SyntheticOptions {
  int64_t size = 1024;               // examples
  Shape image_shape = {3, 32, 32};
  int64_t num_classes = 10;
  uint64_t seed = 0;
  int64_t distinct = 256;            // examples actually stored (at most size)
};

class SyntheticDataset : public Dataset {
 public:
  explicit SyntheticDataset(const SyntheticOptions& options);
  int64_t size() const override { return options_.size; }
  Shape image_shape() const override { return options_.image_shape; }
  int64_t num_classes() const override { return options_.num_classes; }
  int64_t read(int64_t i, float* dst) const override;

 private:
  SyntheticOptions options_;
  int64_t stored_;
  std::vector<float> images_;     // (stored_, image_shape)
  std::vector<int64_t> labels_;   // (stored_)
};

}  // namespace ringflow::data
