#include "ringflow/framework/data/shard_writer.h"

#include <cstdio>
#include <filesystem>
#include <memory>

#include "ringflow/framework/data/sampler.h"
#include "ringflow/framework/data/tar.h"

namespace ringflow::data {

ShardWriteResult write_image_shards(const ImageFolderScan& scan, const std::string& dir,
                                    const ShardWriterOptions& options) {
  RF_CHECK(options.max_count >= 1, "write_image_shards: max_count must be positive, got ", options.max_count);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw std::runtime_error(dir + ": cannot make the folder: " + ec.message());
  ShardWriteResult result;
  result.set.dir = dir;
  result.set.classes = scan.classes;
  const std::vector<int64_t> order =
      random_permutation(static_cast<int64_t>(scan.files.size()), options.seed);
  std::unique_ptr<TarWriter> shard;
  int64_t key = 0;
  for (int64_t i : order) {
    const std::string& path = scan.files[static_cast<size_t>(i)];
    std::vector<uint8_t> bytes;
    ImageHeader header;
    try {
      bytes = read_file_bytes(path);
      header = read_image_header(bytes, path, options.max_image_pixels);
    } catch (const BadExample& e) {
      if (!options.skip_bad_images) throw;
      result.skipped.push_back(e.what());
      continue;
    }
    if (!shard || result.set.samples.back() == options.max_count) {
      if (shard) shard->finish();
      char name[32];
      std::snprintf(name, sizeof name, "shard-%06zu.tar", result.set.files.size());
      result.set.files.push_back(name);
      result.set.samples.push_back(0);
      shard = std::make_unique<TarWriter>(dir + "/" + name);
    }
    char stem[32];
    std::snprintf(stem, sizeof stem, "%08lld", static_cast<long long>(key++));
    const std::string label = std::to_string(scan.labels[static_cast<size_t>(i)]);
    shard->add(std::string(stem) + (header.format == ImageFormat::jpeg ? ".jpg" : ".png"), bytes.data(),
               bytes.size());
    shard->add(std::string(stem) + ".cls", reinterpret_cast<const uint8_t*>(label.data()), label.size());
    ++result.set.samples.back();
  }
  if (shard) shard->finish();
  if (result.set.files.empty()) throw std::invalid_argument(dir + ": no image to write (every one was bad)");
  write_shard_manifest(result.set);
  return result;
}

}  // namespace ringflow::data
