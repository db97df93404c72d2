#include "ringflow/framework/data/jpeg_decoder.h"

#include <turbojpeg.h>

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include <jerror.h>
#include <jpeglib.h>

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

// What libjpeg says of a file: its error, its first warning, and whether it asked for data
// past the end. Errors come by longjmp to the setjmp of the function that decodes; no C++
// object with a destructor lives between the two.
struct LibjpegReport {
  jpeg_error_mgr errors;  // first: libjpeg's pointer to it is one to the report
  std::jmp_buf jump;
  char error[JMSG_LENGTH_MAX];
  char first_warning[JMSG_LENGTH_MAX];
  bool ran_out;  // JWRN_JPEG_EOF: "Premature end of JPEG file"
};

void on_error(j_common_ptr cinfo) {
  auto* report = reinterpret_cast<LibjpegReport*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, report->error);
  std::longjmp(report->jump, 1);
}

void on_message(j_common_ptr cinfo, int level) {
  auto* report = reinterpret_cast<LibjpegReport*>(cinfo->err);
  if (level >= 0) return;  // trace messages
  if (!report->first_warning[0]) (*cinfo->err->format_message)(cinfo, report->first_warning);
  if (cinfo->err->msg_code == JWRN_JPEG_EOF) report->ran_out = true;
}

void report_to(jpeg_decompress_struct& cinfo, LibjpegReport& report) {
  cinfo.err = jpeg_std_error(&report.errors);
  report.errors.error_exit = on_error;
  report.errors.emit_message = on_message;
}

// Whether an end-of-image marker follows the first scan's header, reached by the lengths of
// the segments before it (an Exif thumbnail there has one of its own). Entropy-coded data
// cannot hold one (a 0xFF there is followed by 0x00 or a restart marker), nor can the tables
// between the scans of a progressive file, so a file cut short has none, while a whole file
// whose damage sent libjpeg reading past its end still does.
bool has_end_marker(std::span<const uint8_t> f) {
  size_t at = 2;  // after SOI
  bool scan = false;
  while (!scan && at + 4 <= f.size() && f[at] == 0xFF) {
    scan = f[at + 1] == 0xDA;
    at += 2 + (size_t{f[at + 2]} << 8 | f[at + 3]);
  }
  const uint8_t eoi[] = {0xFF, 0xD9};
  return scan && at < f.size() && std::search(f.begin() + static_cast<std::ptrdiff_t>(at), f.end(),
                                              std::begin(eoi), std::end(eoi)) != f.end();
}

// Throws what libjpeg found wrong, in the order that says what happened: the data ends
// early (truncated; a file cut short fails in any way once libjpeg reads on with fake data),
// an error, or damage that made libjpeg read past the end (PIL refuses all three). Other
// warnings (extraneous bytes, a bad restart marker) leave a whole image, which PIL takes too.
void refuse_if_bad(const std::string& name, const LibjpegReport& report, std::span<const uint8_t> file) {
  if (report.ran_out && !has_end_marker(file))
    fail(name, "truncated JPEG: the file ends before its end-of-image marker (libjpeg-turbo: Premature end of "
               "JPEG file)");
  if (report.error[0]) fail(name, std::string("corrupt JPEG (libjpeg-turbo: ") + report.error + ")");
  if (report.ran_out)
    fail(name, std::string("corrupt JPEG: damaged data made libjpeg-turbo read past the end-of-image marker "
                           "(libjpeg-turbo: ") + report.first_warning + ")");
}

// TurboJPEG's LIMITSCANS for libjpeg's API: a progressive file of over 500 scans takes minutes.
void limit_scans(j_common_ptr cinfo) {
  const auto* d = reinterpret_cast<j_decompress_ptr>(cinfo);
  if (!d->progressive_mode || d->input_scan_number <= 500) return;
  auto* report = reinterpret_cast<LibjpegReport*>(cinfo->err);
  std::snprintf(report->error, sizeof report->error, "Progressive JPEG image has more than 500 scans");
  std::longjmp(report->jump, 1);
}

// The whole file through libjpeg's API, each row decoded and dropped, for what it says:
// TurboJPEG keeps one message, and calls an error that follows a warning a warning.
void read_through(std::span<const uint8_t> file, LibjpegReport& report) {
  jpeg_decompress_struct cinfo;
  jpeg_progress_mgr progress{};
  progress.progress_monitor = limit_scans;
  report_to(cinfo, report);
  if (setjmp(report.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return;
  }
  jpeg_create_decompress(&cinfo);
  cinfo.progress = &progress;
  jpeg_mem_src(&cinfo, file.data(), file.size());
  jpeg_read_header(&cinfo, TRUE);
  jpeg_start_decompress(&cinfo);
  thread_local std::vector<uint8_t> row;  // static storage: nothing for a longjmp to skip
  row.resize(static_cast<size_t>(cinfo.output_width) * static_cast<size_t>(cinfo.output_components));
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW r = row.data();
    jpeg_read_scanlines(&cinfo, &r, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
}

struct RegionJob {
  LibjpegReport report;  // first: libjpeg's pointer to its errors is one to the job
  bool unsupported;      // progressive, CMYK: decode() instead
  const uint8_t* data;
  size_t size;
  int reduction;
  PixelRegion want;
  DecodedImage* out;
};

// Decodes job.want into job.out (or sets job.unsupported); job.report says what went wrong.
void run_libjpeg(RegionJob& job) {
  jpeg_decompress_struct cinfo;
  report_to(cinfo, job.report);
  if (setjmp(job.report.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, job.data, job.size);
  jpeg_read_header(&cinfo, TRUE);
  job.unsupported = cinfo.progressive_mode ||
                    (cinfo.jpeg_color_space != JCS_YCbCr && cinfo.jpeg_color_space != JCS_GRAYSCALE);
  if (job.unsupported) {
    jpeg_destroy_decompress(&cinfo);
    return;
  }
  cinfo.out_color_space = JCS_RGB;
  cinfo.scale_num = 1;
  cinfo.scale_denom = static_cast<unsigned>(job.reduction);
  cinfo.dct_method = JDCT_ISLOW;
  jpeg_start_decompress(&cinfo);
  const int margin = 16;
  const JDIMENSION y0 = static_cast<JDIMENSION>(std::max(0, job.want.y0 - margin));
  const JDIMENSION y1 = std::min(cinfo.output_height, static_cast<JDIMENSION>(job.want.y1 + margin));
  JDIMENSION x0 = static_cast<JDIMENSION>(std::max(0, job.want.x0 - margin));
  JDIMENSION width = std::min(cinfo.output_width, static_cast<JDIMENSION>(job.want.x1 + margin)) - x0;
  jpeg_crop_scanline(&cinfo, &x0, &width);  // x0 down to a block's edge, width up
  DecodedImage& out = *job.out;
  out.x0 = static_cast<int>(x0);
  out.y0 = static_cast<int>(y0);
  out.width = static_cast<int>(width);
  out.height = static_cast<int>(y1 - y0);
  out.rgb.resize(static_cast<size_t>(out.width) * out.height * 3);
  if (y0 > 0) jpeg_skip_scanlines(&cinfo, y0);
  while (cinfo.output_scanline < y1) {
    JSAMPROW row = out.rgb.data() + static_cast<size_t>(cinfo.output_scanline - y0) * width * 3;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  // The rest entropy-decoded up to the last row, which is read: skipping to the very end would
  // not read the data at all, and a file cut there would pass.
  if (cinfo.output_scanline + 1 < cinfo.output_height)
    jpeg_skip_scanlines(&cinfo, cinfo.output_height - 1 - cinfo.output_scanline);
  thread_local std::vector<uint8_t> spare;  // static storage: nothing for a longjmp to skip
  spare.resize(static_cast<size_t>(width) * 3);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = spare.data();
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
}

}  // namespace

bool decode_region(std::span<const uint8_t> file, const std::string& name, int reduction, const PixelRegion& region,
                   DecodedImage& out) {
  RegionJob job{};
  job.data = file.data();
  job.size = file.size();
  job.reduction = reduction;
  job.want = region;
  job.out = &out;
  run_libjpeg(job);
  refuse_if_bad(name, job.report, file);
  return !job.unsupported;
}

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
  if (status != 0) {  // an error or a warning: libjpeg's API tells which (bad files only)
    LibjpegReport report{};
    read_through(file, report);
    if (!report.error[0] && !report.ran_out && !report.first_warning[0])
      fail(name, std::string("cannot decode this JPEG (libjpeg-turbo: ") + tjGetErrorStr2(h) + ")");
    refuse_if_bad(name, report, file);
  }
  if (cmyk) cmyk_to_rgb(cmyk_pixels.data(), pixels, has_adobe_marker(file), out.rgb.data());
}

}  // namespace ringflow::data::jpeg
