#include "ringflow/framework/data/mnist.h"

#include <filesystem>
#include <stdexcept>

#include "ringflow/framework/data/idx.h"

namespace ringflow::data {
namespace {

Shape image_shape_of(const IdxDataset& set, const std::string& path) {
  const auto& s = set.images.shape;
  if (s.size() == 3) return {1, s[1], s[2]};
  if (s.size() == 4) return {s[1], s[2], s[3]};
  throw std::runtime_error("idx file '" + path + "': images must be (N, H, W) or (N, C, H, W), got " +
                           std::to_string(s.size()) + " dimensions");
}

std::string find_file(const std::string& dir, const std::string& name) {
  const std::filesystem::path base = std::filesystem::path(dir) / name;
  for (const std::string& candidate : {base.string() + ".gz", base.string()})
    if (std::filesystem::exists(candidate)) return candidate;
  throw std::runtime_error("mnist: missing file: neither '" + base.string() + ".gz' nor '" +
                           base.string() + "' exists");
}

}  // namespace

Mnist::Mnist(const std::string& images_path, const std::string& labels_path, int64_t num_classes)
    : Mnist(read_idx_pair(images_path, labels_path, num_classes), num_classes, images_path) {}

// image_shape_of reads only the shape, so the order in which the arguments are built (the
// data vectors are moved from) does not matter.
Mnist::Mnist(IdxDataset&& set, int64_t num_classes, const std::string& images_path)
    : ByteImageDataset(std::move(set.images.data), std::move(set.labels.data),
                       image_shape_of(set, images_path), num_classes) {}

std::shared_ptr<Mnist> Mnist::open(const std::string& dir, bool train) {
  const std::string prefix = train ? "train" : "t10k";
  const std::string images = find_file(dir, prefix + "-images-idx3-ubyte");
  const std::string labels = find_file(dir, prefix + "-labels-idx1-ubyte");
  return std::make_shared<Mnist>(images, labels);
}

}  // namespace ringflow::data
