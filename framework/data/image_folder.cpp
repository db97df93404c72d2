#include "ringflow/framework/data/image_folder.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <stdexcept>

namespace ringflow::data {
namespace fs = std::filesystem;
namespace {

// One folder's entries: sub-folders (links followed) and other files, each sorted.
struct Listing {
  std::vector<std::string> folders, files;
};

Listing list_folder(const std::string& dir) {
  Listing l;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) throw std::invalid_argument(dir + ": cannot list the folder: " + ec.message());
  for (const fs::directory_entry& e : it) {
    std::error_code type_ec;
    (e.is_directory(type_ec) ? l.folders : l.files).push_back(e.path().filename().string());
  }
  std::sort(l.folders.begin(), l.folders.end());
  std::sort(l.files.begin(), l.files.end());
  return l;
}

// Every folder under dir (itself included), following links, each once (a link back up
// would otherwise loop); their paths sorted, as sorted(os.walk(dir, followlinks=True)).
void walk(const std::string& dir, std::set<std::pair<dev_t, ino_t>>& seen,
          std::vector<std::pair<std::string, Listing>>& out) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0 && !seen.insert({st.st_dev, st.st_ino}).second) return;
  Listing l = list_folder(dir);
  const std::vector<std::string> folders = l.folders;
  out.emplace_back(dir, std::move(l));
  for (const std::string& f : folders) walk(dir + "/" + f, seen, out);
}

}  // namespace

bool has_image_extension(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const char* ext : {".jpg", ".jpeg", ".png"}) {
    const size_t n = std::char_traits<char>::length(ext);
    if (lower.size() >= n && lower.compare(lower.size() - n, n, ext) == 0) return true;
  }
  return false;
}

ImageFolderScan scan_image_folder(const std::string& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec))
    throw std::invalid_argument(root + ": " + (fs::exists(root, ec) ? "not a folder" : "no such folder") +
                                " (an image folder holds one sub-folder of images per class)");
  ImageFolderScan s;
  s.classes = list_folder(root).folders;
  if (s.classes.empty())
    throw std::invalid_argument(root + ": no class folders in it (an image folder holds one sub-folder of "
                                "images per class: " + root + "/<class>/<image>.jpg)");
  for (size_t c = 0; c < s.classes.size(); ++c) {
    const std::string class_dir = root + "/" + s.classes[c];
    std::set<std::pair<dev_t, ino_t>> seen;
    std::vector<std::pair<std::string, Listing>> folders;
    walk(class_dir, seen, folders);
    std::sort(folders.begin(), folders.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    const size_t before = s.files.size();
    int64_t ignored = 0;
    for (const auto& [dir, listing] : folders) {
      for (const std::string& f : listing.files) {
        if (has_image_extension(f)) {
          s.files.push_back(dir + "/" + f);
          s.labels.push_back(static_cast<int64_t>(c));
        } else {
          ++ignored;
          if (s.ignored_examples.size() < 3) s.ignored_examples.push_back(dir + "/" + f);
        }
      }
    }
    s.ignored += ignored;
    if (s.files.size() == before)
      throw std::invalid_argument(class_dir + ": no .jpg, .jpeg or .png file in this class folder" +
                                  (ignored ? " (" + std::to_string(ignored) + " other files)" : std::string()));
  }
  return s;
}

ImageFolder::ImageFolder(const std::string& root, std::shared_ptr<const ImageTransform> transform,
                         ImageReadOptions options)
    : root_(root), scan_(scan_image_folder(root)), transform_(std::move(transform)), options_(options) {
  RF_CHECK(transform_ != nullptr, "ImageFolder: null transform");
}

std::shared_ptr<ImageFolder> ImageFolder::open(const std::string& dir, bool train,
                                               std::shared_ptr<const ImageTransform> transform,
                                               ImageReadOptions options) {
  const std::string split = dir + (train ? "/train" : "/val");
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw std::invalid_argument(dir + ": no such folder (an image data set is DIR/train/<class>/<images> "
                                "and DIR/val/<class>/<images>)");
  if (!fs::is_directory(split, ec))
    throw std::invalid_argument(split + ": no such folder (an image data set is DIR/train/<class>/<images> "
                                "and DIR/val/<class>/<images>)");
  return std::make_shared<ImageFolder>(split, std::move(transform), options);
}

int64_t ImageFolder::read(int64_t i, float* dst, Generator& gen) const {
  const std::string& path = file(i);
  const std::vector<uint8_t> bytes = read_file_bytes(path);
  read_image_example(bytes, path, *transform_, options_, gen, dst);
  return label(i);
}

int64_t ImageFolder::read(int64_t i, float* dst) const {
  Generator gen(0);
  return read(i, dst, gen);
}

}  // namespace ringflow::data
