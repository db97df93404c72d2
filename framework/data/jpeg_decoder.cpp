#include "ringflow/framework/data/jpeg_decoder.h"

#include <turbojpeg.h>

#include <cstring>
#include <stdexcept>

namespace ringflow::data::jpeg {
namespace {

// TurboJPEG handles are not thread-safe: one per thread, made on first use. After an error
// it is made anew: TurboJPEG 2.1 leaves a handle whose header reading failed mid-way, and
// the next file then fails too ("two SOI markers").
struct Handle {
  tjhandle h = nullptr;
  ~Handle() { reset(); }
  void reset() {
    if (h) tjDestroy(h);
    h = nullptr;
  }
};
thread_local Handle handle;

tjhandle thread_handle() {
  if (!handle.h) handle.h = tjInitDecompress();
  if (!handle.h) throw std::runtime_error(std::string("TurboJPEG: ") + tjGetErrorStr2(nullptr));
  return handle.h;
}

[[noreturn]] void fail(const std::string& name, const std::string& what) {
  handle.reset();
  throw BadExample(name + ": " + what);
}

// Adobe's APP14 marker before the first scan: its CMYK is stored inverted (Photoshop's and
// PIL's files), as PIL reads it ("CMYK;I").
bool has_adobe_marker(std::span<const uint8_t> f) {
  size_t at = 2;  // after SOI
  while (at + 4 <= f.size() && f[at] == 0xFF) {
    const uint8_t marker = f[at + 1];
    if (marker == 0xDA) return false;  // start of scan
    const size_t length = size_t{f[at + 2]} << 8 | f[at + 3];
    if (marker == 0xEE && length >= 7 && at + 9 <= f.size() && std::memcmp(&f[at + 4], "Adobe", 5) == 0)
      return true;
    at += 2 + length;
  }
  return false;
}

// PIL's CMYK -> RGB (Convert.c cmyk2rgb): each of C, M, Y taken off what K leaves, in 8-bit
// fixed point.
void cmyk_to_rgb(const uint8_t* cmyk, size_t pixels, bool inverted, uint8_t* rgb) {
  const auto mul_div_255 = [](int a, int b) {
    const int t = a * b + 128;
    return ((t >> 8) + t) >> 8;
  };
  for (size_t p = 0; p < pixels; ++p, cmyk += 4, rgb += 3) {
    const int k = inverted ? 255 - cmyk[3] : cmyk[3];
    const int nk = 255 - k;
    for (int c = 0; c < 3; ++c) {
      const int v = inverted ? 255 - cmyk[c] : cmyk[c];
      const int out = nk - mul_div_255(v, nk);
      rgb[c] = static_cast<uint8_t>(out < 0 ? 0 : out > 255 ? 255 : out);
    }
  }
}

}  // namespace

bool is_jpeg(std::span<const uint8_t> f) { return f.size() >= 3 && f[0] == 0xFF && f[1] == 0xD8 && f[2] == 0xFF; }

ImageHeader read_header(std::span<const uint8_t> file, const std::string& name) {
  tjhandle h = thread_handle();
  int width = 0, height = 0, subsampling = 0, colorspace = 0;
  if (tjDecompressHeader3(h, file.data(), file.size(), &width, &height, &subsampling, &colorspace) != 0)
    fail(name, std::string("not a readable JPEG (libjpeg-turbo: ") + tjGetErrorStr2(h) + ")");
  return {ImageFormat::jpeg, width, height};
}

void decode(std::span<const uint8_t> file, const std::string& name, int reduction, DecodedImage& out) {
  tjhandle h = thread_handle();
  int width = 0, height = 0, subsampling = 0, colorspace = 0;
  if (tjDecompressHeader3(h, file.data(), file.size(), &width, &height, &subsampling, &colorspace) != 0)
    fail(name, std::string("not a readable JPEG (libjpeg-turbo: ") + tjGetErrorStr2(h) + ")");
  out.width = (width + reduction - 1) / reduction;  // TJSCALED with 1/reduction
  out.height = (height + reduction - 1) / reduction;
  const bool cmyk = colorspace == TJCS_CMYK || colorspace == TJCS_YCCK;
  const size_t pixels = static_cast<size_t>(out.width) * static_cast<size_t>(out.height);
  out.rgb.resize(pixels * 3);
  thread_local std::vector<uint8_t> cmyk_pixels;
  if (cmyk) cmyk_pixels.resize(pixels * 4);
  // Accurate integer IDCT and smooth upsampling, libjpeg's defaults and PIL's: the same pixels.
  // LIMITSCANS refuses progressive files of over 500 scans, which take minutes to decode.
  const int status = tjDecompress2(h, file.data(), file.size(), cmyk ? cmyk_pixels.data() : out.rgb.data(),
                                   out.width, 0, out.height, cmyk ? TJPF_CMYK : TJPF_RGB, TJFLAG_LIMITSCANS);
  if (status != 0) {
    const std::string message = tjGetErrorStr2(h);
    // Warnings (extraneous bytes, a bad restart marker) leave a whole image, which PIL takes
    // too; a file that ends early does not: PIL refuses it ("image file is truncated").
    if (tjGetErrorCode(h) == TJERR_FATAL) fail(name, "corrupt JPEG (libjpeg-turbo: " + message + ")");
    if (message.find("Premature end of JPEG file") != std::string::npos)
      fail(name, "truncated JPEG (libjpeg-turbo: " + message + ")");
  }
  if (cmyk) cmyk_to_rgb(cmyk_pixels.data(), pixels, has_adobe_marker(file), out.rgb.data());
}

}  // namespace ringflow::data::jpeg
