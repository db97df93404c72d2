#include "ringflow/framework/data/image_shards.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <optional>
#include <stdexcept>

#include "ringflow/framework/data/image_folder.h"
#include "ringflow/framework/data/sampler.h"
#include "ringflow/framework/data/tar.h"
#include "ringflow/framework/data/transforms.h"

namespace ringflow::data {
namespace fs = std::filesystem;
namespace {

// A member's key and extension, as WebDataset splits them: the file name at its first '.'.
std::pair<std::string, std::string> split_key(const std::string& name) {
  const size_t slash = name.rfind('/');
  const size_t dot = name.find('.', slash == std::string::npos ? 0 : slash + 1);
  if (dot == std::string::npos) return {name, ""};
  return {name.substr(0, dot), name.substr(dot + 1)};
}

// Samples of one shard, read in order: the members of each key gathered.
class SampleReader {
 public:
  SampleReader(const std::string& path, int64_t num_classes) : tar_(path), num_classes_(num_classes) {}

  // The next sample, with its image's bytes unless read_image is false; false at the end.
  bool next(Record& r, bool read_image = true) {
    std::optional<std::string> key;
    bool has_image = false, has_class = false;
    for (;;) {
      if (!pending_ && !read_member(read_image)) break;
      const auto [k, ext] = split_key(member_.name);
      if (key && k != *key) break;  // the next sample's first member stays pending
      key = k;
      pending_ = false;
      const std::string where = tar_.path() + ": " + member_.name;
      if (ext == "cls") {
        r.label = parse_class(member_.data, num_classes_, where);
        has_class = true;
      } else if (has_image_extension("." + ext) && !has_image) {
        r.bytes = std::move(member_.data);
        r.name = tar_.path() + ":" + member_.name;
        has_image = true;
      }
    }
    if (!key) return false;
    if (!has_image || !has_class)
      throw std::runtime_error(tar_.path() + ": sample '" + *key + "' has no " +
                               (has_image ? ".cls member (its class number)" : ".jpg, .jpeg or .png member") +
                               " (a WebDataset sample is key.jpg + key.cls)");
    return true;
  }

 private:
  bool read_member(bool read_image) {
    const auto want = [read_image](const std::string& name) { return read_image || split_key(name).second == "cls"; };
    if (!tar_.next(member_, want)) return false;
    pending_ = true;
    return true;
  }

  TarReader tar_;
  int64_t num_classes_;
  TarMember member_;
  bool pending_ = false;
};

// One rank's records of one epoch: its shards in turn (again from the first when they run
// out before size()), through the shuffle buffer.
class ShardStream : public RecordStream {
 public:
  ShardStream(std::vector<std::string> files, int64_t num_classes, int64_t count, int64_t buffer, bool shuffle,
              uint64_t seed)
      : files_(std::move(files)), num_classes_(num_classes), count_(count),
        buffer_size_(shuffle ? std::max<int64_t>(1, buffer) : 1), gen_(seed) {}

  bool next(Record& out) override {
    if (given_ >= count_) return false;
    while (static_cast<int64_t>(buffer_.size()) < buffer_size_ && read_ < count_) {
      buffer_.emplace_back();
      read_sample(buffer_.back());
      ++read_;
    }
    const size_t j = static_cast<size_t>(uniform_int(gen_, static_cast<int64_t>(buffer_.size())));
    out = std::move(buffer_[j]);
    buffer_[j] = std::move(buffer_.back());
    buffer_.pop_back();
    ++given_;
    return true;
  }

 private:
  void read_sample(Record& r) {
    for (size_t tries = 0; tries <= files_.size(); ++tries) {
      if (!reader_) reader_ = std::make_unique<SampleReader>(files_[next_file_], num_classes_);
      if (reader_->next(r)) {
        ++pass_samples_;
        return;
      }
      reader_.reset();
      next_file_ = (next_file_ + 1) % files_.size();
      if (next_file_ == 0) {  // a whole pass over the rank's shards
        if (pass_samples_ == 0) break;
        pass_samples_ = 0;
      }
    }
    throw std::runtime_error("shards " + files_.front() + " ...: no samples in this rank's " +
                             std::to_string(files_.size()) + " shards");
  }

  std::vector<std::string> files_;
  int64_t num_classes_, count_, buffer_size_;
  Generator gen_;
  std::vector<Record> buffer_;
  std::unique_ptr<SampleReader> reader_;
  size_t next_file_ = 0;
  int64_t pass_samples_ = 0, read_ = 0, given_ = 0;
};

uint64_t mix(uint64_t z) {  // SplitMix64's finaliser
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

int64_t ShardSet::total() const { return std::accumulate(samples.begin(), samples.end(), int64_t{0}); }

int64_t parse_class(const std::vector<uint8_t>& text, int64_t num_classes, const std::string& where) {
  std::string s(text.begin(), text.end());
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t used = 0;
  int64_t v = -1;
  try {
    v = std::stoll(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != s.size() || v < 0)
    throw std::runtime_error(where + ": '" + s.substr(0, 40) + "' is not a class number");
  if (num_classes > 0 && v >= num_classes)
    throw std::runtime_error(where + ": class " + std::to_string(v) + " is not below the " +
                             std::to_string(num_classes) + " classes of shards.json");
  return v;
}

ShardSet read_shard_set(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw std::invalid_argument(dir + ": no such folder (shards: DIR/train/*.tar, DIR/val/*.tar)");
  ShardSet set;
  set.dir = dir;
  const std::string manifest = dir + "/shards.json";
  if (fs::exists(manifest, ec)) {
    try {
      const nlohmann::json j = nlohmann::json::parse(std::ifstream(manifest));
      set.classes = j.at("classes").get<std::vector<std::string>>();
      for (const auto& s : j.at("shards")) {
        set.files.push_back(s.at("file").get<std::string>());
        set.samples.push_back(s.at("samples").get<int64_t>());
      }
    } catch (const std::exception& e) {
      throw std::runtime_error(manifest + ": not a shard list (" + e.what() + ")");
    }
    for (const std::string& f : set.files)
      if (!fs::is_regular_file(dir + "/" + f, ec)) throw std::runtime_error(manifest + ": lists " + f + ", which is missing");
  } else {  // scan: headers and .cls members only
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().extension() == ".tar") set.files.push_back(e.path().filename().string());
    std::sort(set.files.begin(), set.files.end());
    int64_t max_label = -1;
    for (const std::string& f : set.files) {
      SampleReader reader(dir + "/" + f, 0);
      Record r;
      int64_t n = 0;
      while (reader.next(r, /*read_image=*/false)) {
        ++n;
        max_label = std::max(max_label, r.label);
      }
      set.samples.push_back(n);
    }
    for (int64_t c = 0; c <= max_label; ++c) set.classes.push_back(std::to_string(c));
  }
  if (set.files.empty()) throw std::invalid_argument(dir + ": no .tar shards in it");
  if (set.total() == 0) throw std::invalid_argument(dir + ": its shards hold no samples");
  return set;
}

void write_shard_manifest(const ShardSet& set) {
  nlohmann::json shards = nlohmann::json::array();
  for (size_t i = 0; i < set.files.size(); ++i) shards.push_back({{"file", set.files[i]}, {"samples", set.samples[i]}});
  const std::string path = set.dir + "/shards.json";
  std::ofstream out(path);
  out << nlohmann::json{{"classes", set.classes}, {"shards", shards}}.dump(1) << "\n";
  if (!out) throw std::runtime_error(path + ": write error");
}

namespace {

std::string more_shards(const std::string& detail, const std::string& option) {
  return detail + "; write the images into more shards (a smaller " + option + ")";
}

}  // namespace

TooFewShards::TooFewShards(const std::string& detail)
    : std::invalid_argument(more_shards(detail, "ShardWriterOptions::max_count")), detail(detail) {}

std::string TooFewShards::with_option(const std::string& option) const { return more_shards(detail, option); }

ImageShards::ImageShards(ShardSet set, std::shared_ptr<const ImageTransform> transform, ImageShardsOptions options)
    : set_(std::move(set)), transform_(std::move(transform)), options_(options) {
  RF_CHECK(transform_ != nullptr, "ImageShards: null transform");
  RF_CHECK(options_.world >= 1 && options_.rank >= 0 && options_.rank < options_.world, "ImageShards: rank ",
           options_.rank, " of ", options_.world);
  if (static_cast<int>(set_.files.size()) < options_.world)
    throw TooFewShards(set_.dir + ": " + std::to_string(set_.files.size()) + " shards for " +
                       std::to_string(options_.world) + " ranks: each rank reads shards of its own");
}

std::shared_ptr<ImageShards> ImageShards::open(const std::string& dir, bool train,
                                               std::shared_ptr<const ImageTransform> transform,
                                               ImageShardsOptions options) {
  return std::make_shared<ImageShards>(read_shard_set(dir + (train ? "/train" : "/val")), std::move(transform),
                                       options);
}

std::vector<std::string> ImageShards::rank_shards(int64_t epoch) const {
  const int64_t n = static_cast<int64_t>(set_.files.size());
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  if (options_.shuffle) order = random_permutation(n, options_.seed + static_cast<uint64_t>(epoch));
  std::vector<std::string> mine;
  for (int64_t k = options_.rank; k < n; k += options_.world) mine.push_back(set_.dir + "/" + set_.files[order[k]]);
  return mine;
}

std::unique_ptr<RecordStream> ImageShards::open(int64_t epoch) const {
  const uint64_t seed = mix(mix(options_.seed ^ 0x5eed5a4d5ull) + static_cast<uint64_t>(epoch)) +
                        static_cast<uint64_t>(options_.rank);
  return std::make_unique<ShardStream>(rank_shards(epoch), num_classes(), size(), options_.shuffle_buffer,
                                       options_.shuffle, seed);
}

int64_t ImageShards::decode(const Record& record, float* dst, Generator& gen) const {
  read_image_example(record.bytes, record.name, *transform_, options_.read, gen, dst);
  return record.label;
}

}  // namespace ringflow::data
