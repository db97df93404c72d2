// An image folder (image_folder.h) written as WebDataset tar shards (image_shards.h): the
// samples shuffled so that each shard mixes the classes, then dealt max_count to a shard,
// each image's file copied as it is (key.jpg / key.png by its format, key.cls its class), and
// shards.json listing the shards and the classes. What ringflow-pack runs.
#pragma once

#include <string>
#include <vector>

#include "ringflow/framework/data/image_folder.h"
#include "ringflow/framework/data/image_shards.h"

namespace ringflow::data {

struct ShardWriterOptions {
  int64_t max_count = 1000;  // samples per shard (WebDataset's ShardWriter maxcount)
  uint64_t seed = 0;         // the shuffle
  int64_t max_image_pixels = kDefaultMaxImagePixels;
  bool skip_bad_images = false;  // leave out a file whose header is not a JPEG's or PNG's
};

struct ShardWriteResult {
  ShardSet set;
  std::vector<std::string> skipped;  // why each file left out was bad
};

// Writes scan's images to dir/shard-000000.tar, ... and dir/shards.json (dir made if needed).
// Each image's header is checked (format, pixel limit); a bad one throws BadExample naming it
// unless skip_bad_images.
ShardWriteResult write_image_shards(const ImageFolderScan& scan, const std::string& dir,
                                    const ShardWriterOptions& options = {});

}  // namespace ringflow::data
