// IDX reader: header (magic 00 00 <type> <ndims>, then ndims big-endian u32 sizes), then the
// data bytes, read through zlib's gz* API, which reads gzip and plain files alike. zlib's
// reader forgives two kinds of damage that matter here: a stream without its trailer (its
// CRC, so corruption inside would pass unseen) and bytes after the last gzip member; both
// are refused (check_gzip_end).
#include "ringflow/framework/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace ringflow::data {
namespace {

constexpr uint64_t kMaxBytes = uint64_t{1} << 32;  // a header claiming more is corrupt
constexpr int kMaxDims = 16;
constexpr size_t kChunk = size_t{16} << 20;         // bytes per gzread

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error("idx file '" + path + "': " + what);
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + ")";
}

std::string hex_byte(unsigned value) {
  static const char* digits = "0123456789abcdef";
  return std::string("0x") + digits[(value >> 4) & 15] + digits[value & 15];
}

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzHandle = std::unique_ptr<gzFile_s, GzCloser>;

class Reader {
 public:
  explicit Reader(const std::string& path) : path_(path) {
    errno = 0;
    file_.reset(gzopen(path.c_str(), "rb"));
    if (!file_) fail(path, std::string("cannot open: ") + (errno ? std::strerror(errno) : "gzopen failed"));
    gzbuffer(file_.get(), 1 << 17);
  }

  // Reads up to n bytes into dst; returns how many were read (fewer only at the end).
  size_t read(void* dst, size_t n) {
    size_t done = 0;
    while (done < n) {
      const auto want = static_cast<unsigned>(std::min(n - done, kChunk));
      const int got = gzread(file_.get(), static_cast<char*>(dst) + done, want);
      if (got < 0) fail(path_, "read error: " + error_text());
      if (got == 0) break;
      done += static_cast<size_t>(got);
    }
    return done;
  }

  // " (gzip: unexpected end of file)" when zlib saw a cut-off stream, else "".
  std::string stream_note() {
    int code = Z_OK;
    std::string msg = gzerror(file_.get(), &code);
    if (code == Z_OK) return "";
    if (msg.starts_with(path_ + ": ")) msg.erase(0, path_.size() + 2);  // zlib prefixes the path
    return " (gzip: " + msg + ")";
  }

 private:
  std::string error_text() {
    int code = Z_OK;
    const char* msg = gzerror(file_.get(), &code);
    if (code == Z_ERRNO) return std::strerror(errno);
    return msg ? msg : "unknown zlib error";
  }

  std::string path_;
  GzHandle file_;
};

// A gzip file whose members all end with their trailers and nothing after the last one.
// Plain files pass. Reads the compressed bytes once more: a second, cheaper pass than
// tracking member ends through gzread.
void check_gzip_end(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!file) fail(path, std::string("cannot open: ") + std::strerror(errno));
  unsigned char magic[2] = {};
  if (std::fread(magic, 1, 2, file.get()) < 2 || magic[0] != 0x1f || magic[1] != 0x8b) return;
  std::rewind(file.get());
  z_stream z{};
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) fail(path, "zlib: inflateInit2 failed");
  std::unique_ptr<z_stream, int (*)(z_stream*)> owner(&z, &inflateEnd);
  std::vector<unsigned char> in(size_t{1} << 20), out(size_t{1} << 20);
  bool member_ended = false;
  uint64_t after = 0;  // bytes after the last member's end that start no member
  for (;;) {
    if (z.avail_in == 0) {
      z.avail_in = static_cast<uInt>(std::fread(in.data(), 1, in.size(), file.get()));
      z.next_in = in.data();
      if (z.avail_in == 0) break;
    }
    if (member_ended) {
      // Another member may follow (concatenated gzip); anything else is garbage.
      if (z.avail_in >= 2 && z.next_in[0] == 0x1f && z.next_in[1] == 0x8b) {
        inflateReset(&z);
        member_ended = false;
      } else {
        after += z.avail_in;
        z.avail_in = 0;
        continue;
      }
    }
    z.next_out = out.data();
    z.avail_out = static_cast<uInt>(out.size());
    const int rc = inflate(&z, Z_NO_FLUSH);
    if (rc == Z_STREAM_END) {
      member_ended = true;
    } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
      fail(path, std::string("gzip: ") + (z.msg ? z.msg : "corrupt stream"));
    }
  }
  if (!member_ended) fail(path, "gzip: the stream ends without its trailer (truncated file)");
  if (after > 0) fail(path, "trailing garbage: " + std::to_string(after) + " bytes after the gzip stream");
}

}  // namespace

IdxArray read_idx(const std::string& path) {
  Reader in(path);

  std::array<uint8_t, 4> magic{};
  const size_t got_magic = in.read(magic.data(), magic.size());
  if (got_magic < magic.size())
    fail(path, "truncated header: " + std::to_string(got_magic) + " of 4 magic bytes" +
                   in.stream_note());
  if (magic[0] != 0 || magic[1] != 0)
    fail(path, "wrong magic " + hex_byte(magic[0]) + hex_byte(magic[1]).substr(2) +
                   hex_byte(magic[2]).substr(2) + hex_byte(magic[3]).substr(2) +
                   " (an IDX file starts with 0x0000 <type> <ndims>)");
  if (magic[2] != 0x08)
    fail(path, "unsupported data type byte " + hex_byte(magic[2]) +
                   " (only unsigned byte, 0x08, is supported)");
  const int ndims = magic[3];
  if (ndims < 1 || ndims > kMaxDims)
    fail(path, "unsupported number of dimensions " + std::to_string(ndims) + " (1 to " +
                   std::to_string(kMaxDims) + ")");

  std::array<uint8_t, 4 * kMaxDims> dims_be{};
  const size_t dim_bytes = 4 * static_cast<size_t>(ndims);
  const size_t got_dims = in.read(dims_be.data(), dim_bytes);
  if (got_dims < dim_bytes)
    fail(path, "truncated header: " + std::to_string(ndims) + " dimension sizes need " +
                   std::to_string(dim_bytes) + " bytes, the file has " +
                   std::to_string(got_dims) + in.stream_note());

  IdxArray out;
  uint64_t total = 1;
  for (int d = 0; d < ndims; ++d) {
    const uint8_t* b = &dims_be[4 * d];
    const uint64_t size = (uint64_t{b[0]} << 24) | (uint64_t{b[1]} << 16) |
                          (uint64_t{b[2]} << 8) | uint64_t{b[3]};
    out.shape.push_back(static_cast<int64_t>(size));
    // Both factors are below 2^32, so the product cannot overflow 64 bits.
    if (total <= kMaxBytes) total *= size;
  }
  if (total > kMaxBytes)
    fail(path, "header announces shape " + shape_text(out.shape) + ", more than the " +
                   std::to_string(kMaxBytes >> 30) + " GiB limit (corrupt header?)");

  // Grow with the bytes actually read, so a lying header costs at most one chunk extra.
  const auto expected = static_cast<size_t>(total);
  out.data.reserve(std::min(expected, size_t{64} << 20));
  size_t have = 0;
  while (have < expected) {
    const size_t step = std::min(expected - have, kChunk);
    out.data.resize(have + step);
    const size_t got = in.read(out.data.data() + have, step);
    have += got;
    if (got < step) {
      out.data.resize(have);
      fail(path, "truncated data: the header announces shape " + shape_text(out.shape) + " (" +
                     std::to_string(expected) + " bytes), the file holds " +
                     std::to_string(have) + in.stream_note());
    }
  }

  std::array<uint8_t, 4096> rest{};
  size_t extra = 0;
  for (size_t got; (got = in.read(rest.data(), rest.size())) > 0;) extra += got;
  if (extra > 0)
    fail(path, "trailing garbage: " + std::to_string(extra) + " bytes after the " +
                   std::to_string(expected) + " data bytes of shape " + shape_text(out.shape));
  check_gzip_end(path);
  return out;
}

IdxDataset read_idx_pair(const std::string& images_path, const std::string& labels_path,
                         int64_t num_classes) {
  if (num_classes < 1 || num_classes > 256)
    throw std::invalid_argument("read_idx_pair: num_classes must be 1..256, got " +
                                std::to_string(num_classes));
  IdxDataset set{read_idx(images_path), read_idx(labels_path)};
  if (set.labels.shape.size() != 1)
    fail(labels_path, "labels must be 1-D, got shape " + shape_text(set.labels.shape));
  const int64_t n_images = set.images.shape[0];
  const int64_t n_labels = set.labels.shape[0];
  if (n_images != n_labels)
    fail(labels_path, "image/label count mismatch: " + std::to_string(n_labels) +
                          " labels for " + std::to_string(n_images) + " images in '" +
                          images_path + "'");
  for (size_t i = 0; i < set.labels.data.size(); ++i)
    if (set.labels.data[i] >= num_classes)
      fail(labels_path, "label out of range: label " + std::to_string(set.labels.data[i]) +
                            " at index " + std::to_string(i) + " is not below " +
                            std::to_string(num_classes) + " classes");
  return set;
}

}  // namespace ringflow::data
