// Images in class folders, torchvision's ImageFolder convention: root/<class>/**/<image>.
// Classes are the sub-folders of root in sorted order (label = position); each class's files
// are found as torchvision's make_dataset finds them (os.walk following links, folders in
// sorted order of their paths, files sorted within each), so labels and the order of the
// examples are torchvision's. Files ending in .jpg, .jpeg or .png (any case) are images; the
// others are ignored and counted. A data set is read from DIR/train and DIR/val.
//
// Reading an example opens, decodes and transforms its file (image_example.h) in the calling
// thread: the DataLoader's workers decode in parallel. A file that cannot be read or decoded
// throws BadExample naming it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ringflow/framework/data/dataset.h"
#include "ringflow/framework/data/image_example.h"

namespace ringflow::data {

// What a scan of root found. Throws std::invalid_argument naming the folder: root missing
// or not a folder, no class folder in it, a class folder without images, a folder that
// cannot be listed.
struct ImageFolderScan {
  std::vector<std::string> classes;
  std::vector<std::string> files;  // paths, root included
  std::vector<int64_t> labels;     // per file
  int64_t ignored = 0;             // files of other extensions
  std::vector<std::string> ignored_examples;  // the first few of them
};
ImageFolderScan scan_image_folder(const std::string& root);

// Is `name` an image by its extension (.jpg, .jpeg, .png, any case)?
bool has_image_extension(const std::string& name);

class ImageFolder : public Dataset {
 public:
  ImageFolder(const std::string& root, std::shared_ptr<const ImageTransform> transform,
              ImageReadOptions options = {});
  // DIR/train or DIR/val; says which is missing and what the layout must be.
  static std::shared_ptr<ImageFolder> open(const std::string& dir, bool train,
                                           std::shared_ptr<const ImageTransform> transform,
                                           ImageReadOptions options = {});

  int64_t size() const override { return static_cast<int64_t>(scan_.files.size()); }
  Shape image_shape() const override { return {3, transform_->height(), transform_->width()}; }
  int64_t num_classes() const override { return static_cast<int64_t>(scan_.classes.size()); }
  int64_t read(int64_t i, float* dst, Generator& gen) const override;
  int64_t read(int64_t i, float* dst) const override;  // with Generator(0)
  int64_t label(int64_t i) const override { return scan_.labels[static_cast<size_t>(i)]; }

  const std::string& root() const { return root_; }
  const std::vector<std::string>& classes() const { return scan_.classes; }
  const std::string& file(int64_t i) const { return scan_.files[static_cast<size_t>(i)]; }
  const ImageFolderScan& scan() const { return scan_; }

 private:
  std::string root_;
  ImageFolderScan scan_;
  std::shared_ptr<const ImageTransform> transform_;
  ImageReadOptions options_;
};

}  // namespace ringflow::data
