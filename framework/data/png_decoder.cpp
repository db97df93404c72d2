#include "ringflow/framework/data/png_decoder.h"

#include <png.h>

#include <csetjmp>
#include <cstring>

namespace ringflow::data::png {
namespace {

// libpng reports errors by longjmp to the setjmp in run_libpng; the message waits here. No
// C++ object with a destructor lives between the two.
struct Reader {
  const uint8_t* data;
  size_t size, at;
  char error[256];
};

void on_error(png_structp png, png_const_charp message) {
  auto* r = static_cast<Reader*>(png_get_error_ptr(png));
  std::snprintf(r->error, sizeof r->error, "%s", message);
  png_longjmp(png, 1);
}

void on_warning(png_structp, png_const_charp) {}  // ancillary chunks' CRCs and the like

void on_read(png_structp png, png_bytep dst, size_t n) {
  auto* r = static_cast<Reader*>(png_get_io_ptr(png));
  if (n > r->size - r->at) png_error(png, "truncated: the file ends inside a chunk");
  std::memcpy(dst, r->data + r->at, n);
  r->at += n;
}

// Reads the header, or the header and every row (rows != null: height pointers to rows of
// width * 3 bytes). 0 on success, else r.error says why.
int run_libpng(Reader& r, png_uint_32* width, png_uint_32* height, png_bytep* rows) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &r, on_error, on_warning);
  if (!png) {
    std::snprintf(r.error, sizeof r.error, "out of memory");
    return 1;
  }
  png_infop info = png_create_info_struct(png);
  if (!info) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    std::snprintf(r.error, sizeof r.error, "out of memory");
    return 1;
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    return 1;
  }
  png_set_read_fn(png, &r, on_read);
  png_set_user_limits(png, 0x7fffffff, 0x7fffffff);  // the caller's pixel limit decides
  png_read_info(png, info);
  *width = png_get_image_width(png, info);
  *height = png_get_image_height(png, info);
  if (rows) {
    // To 8-bit RGB as PIL's convert("RGB"): palettes and low-depth grey expanded, 16 bits
    // to their high byte, alpha (and tRNS) dropped, grey replicated; no gamma correction.
    const int color = png_get_color_type(png, info);
    if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (color == PNG_COLOR_TYPE_GRAY && png_get_bit_depth(png, info) < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (png_get_bit_depth(png, info) == 16) png_set_strip_16(png);
    png_set_strip_alpha(png);
    if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    if (png_get_rowbytes(png, info) != static_cast<size_t>(*width) * 3) png_error(png, "unexpected row size");
    png_read_image(png, rows);
    png_read_end(png, nullptr);
  }
  png_destroy_read_struct(&png, &info, nullptr);
  return 0;
}

}  // namespace

bool is_png(std::span<const uint8_t> f) {
  static const uint8_t signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  return f.size() >= 8 && std::memcmp(f.data(), signature, 8) == 0;
}

ImageHeader read_header(std::span<const uint8_t> file, const std::string& name) {
  Reader r{file.data(), file.size(), 0, {}};
  png_uint_32 width = 0, height = 0;
  if (run_libpng(r, &width, &height, nullptr) != 0)
    throw BadExample(name + ": corrupt PNG (libpng: " + r.error + ")");
  return {ImageFormat::png, static_cast<int>(width), static_cast<int>(height)};
}

void decode(std::span<const uint8_t> file, const std::string& name, DecodedImage& out) {
  const ImageHeader header = read_header(file, name);
  out.width = header.width;
  out.height = header.height;
  const size_t row = static_cast<size_t>(out.width) * 3;
  out.rgb.resize(row * static_cast<size_t>(out.height));
  thread_local std::vector<png_bytep> rows;
  rows.resize(static_cast<size_t>(out.height));
  for (size_t y = 0; y < rows.size(); ++y) rows[y] = out.rgb.data() + y * row;
  Reader r{file.data(), file.size(), 0, {}};
  png_uint_32 width = 0, height = 0;
  if (run_libpng(r, &width, &height, rows.data()) != 0)
    throw BadExample(name + ": corrupt PNG (libpng: " + r.error + ")");
}

}  // namespace ringflow::data::png
