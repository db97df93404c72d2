// One image file's bytes to one example of an image data set (ImageFolder, ImageShards): the
// header read, the transform's random parameters drawn, the file decoded (a JPEG reduced
// where the transform allows it), the transform applied into the batch's memory.
#pragma once

#include <span>
#include <string>

#include "ringflow/framework/data/image_transform.h"

namespace ringflow::data {

struct ImageReadOptions {
  int64_t max_image_pixels = kDefaultMaxImagePixels;  // <= 0: no limit
  // Decode JPEGs at 1/2, 1/4 or 1/8 of their size where the region kept stays at least as
  // large as the output (ImageTransform::reduction); false: PIL's pixels exactly.
  bool reduce_on_decode = true;
  // Decode a baseline JPEG's crop region (and a margin) only: the same pixels, less work.
  bool decode_region = true;
};

// Writes the transformed image to dst (3, transform.height(), transform.width()); name is for
// messages. Throws BadExample naming it.
void read_image_example(std::span<const uint8_t> file, const std::string& name, const ImageTransform& transform,
                        const ImageReadOptions& options, Generator& gen, float* dst);

// The image's class folders' names, joined for a log line ("cat, dog, ...": the first
// `shown`, then how many more).
std::string class_list(const std::vector<std::string>& classes, size_t shown = 20);

}  // namespace ringflow::data
