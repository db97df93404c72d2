#include "ringflow/framework/data/image_decoder.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "ringflow/framework/data/jpeg_decoder.h"
#include "ringflow/framework/data/png_decoder.h"

namespace ringflow::data {
namespace {

// The first bytes, for a message about a file that is neither format.
std::string first_bytes(std::span<const uint8_t> file) {
  std::string hex;
  char b[4];
  for (size_t i = 0; i < std::min<size_t>(file.size(), 8); ++i) {
    std::snprintf(b, sizeof b, "%02x ", file[i]);
    hex += b;
  }
  return hex.empty() ? "an empty file" : "bytes " + hex.substr(0, hex.size() - 1);
}

std::string above_limit(const std::string& detail, const std::string& option) {
  return detail + "; raise " + option + " if the image is real";
}

}  // namespace

ImageAboveLimit::ImageAboveLimit(const std::string& detail)
    : BadExample(above_limit(detail, "max_image_pixels")), detail(detail) {}

std::string ImageAboveLimit::with_option(const std::string& option) const { return above_limit(detail, option); }

ImageHeader read_image_header(std::span<const uint8_t> file, const std::string& name, int64_t max_pixels) {
  ImageHeader h;
  if (jpeg::is_jpeg(file)) h = jpeg::read_header(file, name);
  else if (png::is_png(file)) h = png::read_header(file, name);
  else throw BadExample(name + ": neither a JPEG nor a PNG (it starts with " + first_bytes(file) + ")");
  if (h.width <= 0 || h.height <= 0)
    throw BadExample(name + ": the header says " + std::to_string(h.width) + "x" + std::to_string(h.height) + " pixels");
  const int64_t pixels = int64_t{h.width} * h.height;
  if (max_pixels > 0 && pixels > max_pixels)
    throw ImageAboveLimit(name + ": " + std::to_string(h.width) + "x" + std::to_string(h.height) + " = " +
                          std::to_string(pixels) + " pixels is above the limit of " + std::to_string(max_pixels) +
                          " (a decompression bomb?)");
  return h;
}

void decode_image(std::span<const uint8_t> file, const ImageHeader& header, const std::string& name,
                  DecodedImage& out, int reduction, const PixelRegion* region) {
  RF_CHECK(reduction == 1 || reduction == 2 || reduction == 4 || reduction == 8,
           "decode_image: reduction must be 1, 2, 4 or 8, got ", reduction);
  out.x0 = out.y0 = 0;
  if (header.format == ImageFormat::jpeg) {
    if (!region || !jpeg::decode_region(file, name, reduction, *region, out)) jpeg::decode(file, name, reduction, out);
  } else {
    RF_CHECK(reduction == 1, "decode_image: PNGs decode at full size only, got reduction ", reduction);
    png::decode(file, name, out);
  }
}

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  struct Closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  errno = 0;
  std::unique_ptr<std::FILE, Closer> f(std::fopen(path.c_str(), "rb"));
  if (!f) throw BadExample(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (fstat(fileno(f.get()), &st) != 0) throw BadExample(path + ": cannot stat: " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw BadExample(path + ": a folder, not a file");
  std::vector<uint8_t> bytes(static_cast<size_t>(st.st_size));
  const size_t n = std::fread(bytes.data(), 1, bytes.size(), f.get());
  if (n != bytes.size())
    throw BadExample(path + ": read error: " + (std::ferror(f.get()) ? std::strerror(errno) : "short read"));
  return bytes;
}

}  // namespace ringflow::data
