#include "ringflow/framework/data/synthetic.h"

#include <algorithm>
#include <cstring>

#include "ringflow/framework/random.h"

namespace ringflow::data {

SyntheticDataset::SyntheticDataset(const SyntheticOptions& o) : options_(o) {
  RF_CHECK(o.size >= 0, "SyntheticDataset: negative size ", o.size);
  RF_CHECK(o.num_classes >= 1, "SyntheticDataset: num_classes must be positive, got ", o.num_classes);
  RF_CHECK(o.distinct >= 1, "SyntheticDataset: distinct must be positive, got ", o.distinct);
  for (int64_t s : o.image_shape)
    RF_CHECK(s >= 1, "SyntheticDataset: bad image shape ", shape_str(o.image_shape));
  stored_ = std::min(o.size, o.distinct);
  const int64_t numel = shape_numel(o.image_shape);
  Generator gen(o.seed);
  images_.resize(static_cast<size_t>(stored_ * numel));
  for (float& v : images_) v = static_cast<float>(gen.normal());
  labels_.resize(static_cast<size_t>(stored_));
  for (int64_t& l : labels_) l = static_cast<int64_t>(gen.next_u64() % static_cast<uint64_t>(o.num_classes));
}

int64_t SyntheticDataset::read(int64_t i, float* dst) const {
  const int64_t k = i % stored_;
  const int64_t numel = shape_numel(options_.image_shape);
  std::memcpy(dst, images_.data() + k * numel, static_cast<size_t>(numel) * sizeof(float));
  return labels_[static_cast<size_t>(k)];
}

}  // namespace ringflow::data
