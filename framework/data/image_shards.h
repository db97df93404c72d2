// Images in WebDataset tar shards (what ringflow-pack writes), read as a stream: DIR/*.tar,
// each sample the members that share a key (a member's path up to the first '.' of its file
// name): key.jpg, key.jpeg or key.png (the image) and key.cls (its class number, decimal
// text); other members are passed over. DIR/shards.json, when present, lists the shards, their
// sample counts and the class names; without it the shards are scanned once at start-up
// (headers and .cls members: no image is read) and the classes are named by their numbers.
//
// Each epoch the shards are put in a random order (seed + epoch) and dealt to the ranks in
// turn: shard k of the order to rank k % world. A rank reads its shards one after the other
// through a shuffle buffer (WebDataset's shuffle(n)) seeded by (seed, epoch, rank), and every
// rank reads size() = total / world samples, so that all take the same number of steps: its
// shards are read again from the start if they hold fewer, and left unfinished if more.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "ringflow/framework/data/image_example.h"
#include "ringflow/framework/data/iterable_dataset.h"

namespace ringflow::data {

struct ShardSet {
  std::string dir;
  std::vector<std::string> classes;
  std::vector<std::string> files;  // shard file names in dir
  std::vector<int64_t> samples;    // per shard
  int64_t total() const;
};

// Reads DIR/shards.json, or scans DIR/*.tar. Throws std::invalid_argument naming the folder
// (missing, no shards) and std::runtime_error naming the shard (not a tar, cut inside a
// member, a sample without image or class, a class number that is not one).
ShardSet read_shard_set(const std::string& dir);
// Writes DIR/shards.json for set (ringflow-pack).
void write_shard_manifest(const ShardSet& set);

// The class of a .cls member's text; throws std::runtime_error naming `where`.
int64_t parse_class(const std::vector<uint8_t>& text, int64_t num_classes, const std::string& where);

struct ImageShardsOptions {
  int rank = 0, world = 1;
  bool shuffle = true;           // false: the shards in order, no buffer (evaluation)
  uint64_t seed = 0;
  int64_t shuffle_buffer = 1000;  // samples held to shuffle within a rank's stream
  ImageReadOptions read = {};
};

// Fewer shards than ranks, each of which reads shards of its own. what() says to write the
// images into more shards with a smaller ShardWriterOptions::max_count; a program names its
// own flag through with_option.
class TooFewShards : public std::invalid_argument {
 public:
  // detail: "DIR: S shards for R ranks: each rank reads shards of its own"
  explicit TooFewShards(const std::string& detail);
  // detail and how to write more shards: `option` ("ShardWriterOptions::max_count", ...).
  std::string with_option(const std::string& option) const;
  std::string detail;
};

class ImageShards : public IterableDataset {
 public:
  // Throws TooFewShards where there are fewer shards than ranks.
  ImageShards(ShardSet set, std::shared_ptr<const ImageTransform> transform, ImageShardsOptions options = {});
  // DIR/train or DIR/val.
  static std::shared_ptr<ImageShards> open(const std::string& dir, bool train,
                                           std::shared_ptr<const ImageTransform> transform,
                                           ImageShardsOptions options = {});

  int64_t size() const override { return set_.total() / options_.world; }
  Shape image_shape() const override { return {3, transform_->height(), transform_->width()}; }
  int64_t num_classes() const override { return static_cast<int64_t>(set_.classes.size()); }
  std::unique_ptr<RecordStream> open(int64_t epoch) const override;
  int64_t decode(const Record& record, float* dst, Generator& gen) const override;

  const ShardSet& shards() const { return set_; }
  // The shard files this rank reads in `epoch`, in order.
  std::vector<std::string> rank_shards(int64_t epoch) const;

 private:
  ShardSet set_;
  std::shared_ptr<const ImageTransform> transform_;
  ImageShardsOptions options_;
};

}  // namespace ringflow::data
