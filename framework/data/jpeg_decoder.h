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
// A region of a baseline YCbCr or greyscale JPEG through libjpeg's API (false for other
// files: decode() them): the columns beside it are not transformed (jpeg_crop_scanline), the
// rows above and below it only entropy-decoded (jpeg_skip_scanlines); a margin of 16 pixels
// keeps the upsampling at its edges the whole decode's.
bool decode_region(std::span<const uint8_t> file, const std::string& name, int reduction, const PixelRegion& region,
                   DecodedImage& out);

}  // namespace ringflow::data::jpeg
