#include "ringflow/framework/data/cifar10.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace ringflow::data {
namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error("cifar10 file '" + path + "': " + what);
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

// Appends the file's records to pixels and labels.
void read_file(const std::string& path, int64_t records_per_file, std::vector<uint8_t>& pixels,
               std::vector<uint8_t>& labels) {
  errno = 0;
  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(path.c_str(), "rb"));
  if (!f) fail(path, std::string("cannot open: ") + (errno ? std::strerror(errno) : "fopen failed"));
  std::error_code ec;
  const auto bytes = static_cast<int64_t>(std::filesystem::file_size(path, ec));
  if (ec) fail(path, "cannot read its size: " + ec.message());
  if (bytes == 0) fail(path, "empty file (expected records of 3073 bytes: 1 label + 3072 pixels)");
  if (bytes % kCifar10RecordBytes != 0)
    fail(path, "truncated or not a CIFAR-10 binary file: " + std::to_string(bytes) +
                   " bytes is not a whole number of 3073-byte records (1 label + 3072 pixels); " +
                   std::to_string(bytes / kCifar10RecordBytes) + " records and " +
                   std::to_string(bytes % kCifar10RecordBytes) + " bytes left over");
  const int64_t records = bytes / kCifar10RecordBytes;
  if (records_per_file > 0 && records != records_per_file)
    fail(path, std::string(records < records_per_file ? "truncated: " : "too long: ") +
                   std::to_string(records) + " records, expected " + std::to_string(records_per_file));

  std::vector<uint8_t> raw(static_cast<size_t>(bytes));
  if (std::fread(raw.data(), 1, raw.size(), f.get()) != raw.size())
    fail(path, std::string("read error: ") + (std::ferror(f.get()) ? std::strerror(errno) : "short read"));
  const size_t image_bytes = kCifar10RecordBytes - 1;
  const size_t first = labels.size();
  pixels.resize(pixels.size() + records * image_bytes);
  labels.resize(labels.size() + records);
  for (int64_t r = 0; r < records; ++r) {
    const uint8_t* rec = raw.data() + r * kCifar10RecordBytes;
    if (rec[0] > 9)
      fail(path, "label out of range: label " + std::to_string(rec[0]) + " in record " +
                     std::to_string(r) + " (byte offset " + std::to_string(r * kCifar10RecordBytes) +
                     ") is not below 10 classes");
    labels[first + r] = rec[0];
    std::memcpy(pixels.data() + (first + r) * image_bytes, rec + 1, image_bytes);
  }
}

}  // namespace

struct Cifar10::Loaded {
  std::vector<uint8_t> pixels, labels;
};

Cifar10::Loaded Cifar10::load(const std::vector<std::string>& files, int64_t records_per_file) {
  if (files.empty()) throw std::invalid_argument("Cifar10: no files given");
  if (records_per_file < 0)
    throw std::invalid_argument("Cifar10: records_per_file must be >= 0, got " + std::to_string(records_per_file));
  Cifar10::Loaded out;
  for (const std::string& path : files) read_file(path, records_per_file, out.pixels, out.labels);
  return out;
}

Cifar10::Cifar10(const std::vector<std::string>& files, int64_t records_per_file)
    : Cifar10(load(files, records_per_file)) {}

Cifar10::Cifar10(Loaded&& loaded)
    : ByteImageDataset(std::move(loaded.pixels), std::move(loaded.labels), {3, 32, 32}, 10) {}

std::vector<std::string> Cifar10::file_names(bool train) {
  if (!train) return {"test_batch.bin"};
  std::vector<std::string> names;
  for (int i = 1; i <= 5; ++i) names.push_back("data_batch_" + std::to_string(i) + ".bin");
  return names;
}

std::shared_ptr<Cifar10> Cifar10::open(const std::string& dir, bool train, int64_t records_per_file) {
  std::vector<std::string> paths;
  for (const std::string& name : file_names(train)) paths.push_back((std::filesystem::path(dir) / name).string());
  return std::make_shared<Cifar10>(paths, records_per_file);
}

}  // namespace ringflow::data
