// Image files to RGB pixels: JPEG through libjpeg-turbo (TurboJPEG), PNG through libpng, the
// only code of ringflow that sees either library. Every image comes out as 8-bit RGB, rows of
// width * 3 bytes, converted as PIL's Image.convert("RGB") does (what torchvision's ImageFolder
// loads): grayscale replicated, alpha dropped (not composited), palettes expanded, CMYK
// multiplied out; 16-bit PNG samples keep their high byte.
//
// Bad input throws BadExample naming the file and saying what is wrong (the decoder's own
// message where it has one): a corrupt or truncated file, a format other than JPEG or PNG,
// an image above the pixel limit (refused from its header, before anything is allocated:
// decompression bombs). Thread-safe: each thread keeps its own TurboJPEG handle.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ringflow/framework/data/dataset.h"

namespace ringflow::data {

enum class ImageFormat { jpeg, png };

// PIL's Image.MAX_IMAGE_PIXELS: above it PIL warns of a decompression bomb.
constexpr int64_t kDefaultMaxImagePixels = 89478485;

// An image whose header gives it more pixels than the limit (the max_image_pixels of
// ImageReadOptions and ShardWriterOptions), refused before anything is allocated. what() says
// to raise max_image_pixels; a program names its own flag through with_option.
class ImageAboveLimit : public BadExample {
 public:
  // detail: "NAME: WxH = P pixels is above the limit of L (a decompression bomb?)"
  explicit ImageAboveLimit(const std::string& detail);
  // detail and how to raise the limit: `option` ("max_image_pixels", "--max-image-pixels").
  std::string with_option(const std::string& option) const;
  std::string detail;
};

struct ImageHeader {
  ImageFormat format;
  int width = 0, height = 0;  // pixels, as stored
};

struct DecodedImage {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;  // (height, width, 3)
  int x0 = 0, y0 = 0;        // where these pixels sit in the whole image (a region was decoded)
};

// A part of an image, in its pixels (of the image reduced, for a reduced decode).
struct PixelRegion {
  int x0 = 0, y0 = 0, x1 = 0, y1 = 0;
};

// The format (by the file's first bytes, not its name) and size. `name` is for messages;
// max_pixels <= 0: no limit, above it ImageAboveLimit.
ImageHeader read_image_header(std::span<const uint8_t> file, const std::string& name,
                              int64_t max_pixels = kDefaultMaxImagePixels);

// Decodes the whole image, or a JPEG at 1/reduction of its size in each dimension
// (reduction 1, 2, 4 or 8; libjpeg-turbo's scaled IDCT: each side ceil(side / reduction)).
// PNGs decode at full size (reduction must be 1). out is reused: its buffer grows only.
// With `region`, a baseline JPEG may be decoded in part: at least the region, with the same
// pixels there as a whole decode (out.x0, out.y0 say where); the rest of the file is still
// read through, so that a truncated or corrupt file is found whatever the region.
void decode_image(std::span<const uint8_t> file, const ImageHeader& header, const std::string& name,
                  DecodedImage& out, int reduction = 1, const PixelRegion* region = nullptr);

// The whole file's bytes; throws BadExample naming it when it cannot be read (missing,
// permissions, a folder).
std::vector<uint8_t> read_file_bytes(const std::string& path);

}  // namespace ringflow::data
