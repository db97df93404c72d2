// JPEG through TurboJPEG (libjpeg-turbo), for image_decoder.cpp alone.
#pragma once

#include <span>
#include <string>

#include "ringflow/framework/data/image_decoder.h"

namespace ringflow::data::jpeg {

bool is_jpeg(std::span<const uint8_t> file);
// width and height from the frame header; throws BadExample.
ImageHeader read_header(std::span<const uint8_t> file, const std::string& name);
void decode(std::span<const uint8_t> file, const std::string& name, int reduction, DecodedImage& out);

}  // namespace ringflow::data::jpeg
