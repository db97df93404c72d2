// PNG through libpng, for image_decoder.cpp alone.
#pragma once

#include <span>
#include <string>

#include "ringflow/framework/data/image_decoder.h"

namespace ringflow::data::png {

bool is_png(std::span<const uint8_t> file);
// width and height from the IHDR chunk; throws BadExample.
ImageHeader read_header(std::span<const uint8_t> file, const std::string& name);
void decode(std::span<const uint8_t> file, const std::string& name, DecodedImage& out);

}  // namespace ringflow::data::png
