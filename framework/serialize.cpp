#include "ringflow/framework/serialize.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <zlib.h>

#include <algorithm>
#include <iomanip>
#include <sstream>

#include "ringflow/framework/ops.h"
#include "ringflow/framework/printable.h"

namespace ringflow {
namespace {

const char* safetensors_dtype(DType d) {
  switch (d) {
    case DType::f32: return "F32";
    case DType::f64: return "F64";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
    case DType::i32: return "I32";
    case DType::i64: return "I64";
  }
  return "?";
}

// Every message about a file goes through here: what the file holds (names, dtypes, the
// JSON parser's excerpt) is printed escaped.
[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error(printable(cat(path, ": ", what)));
}

DType from_safetensors_dtype(const std::string& s, const std::string& path, const std::string& name) {
  for (DType d : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64})
    if (s == safetensors_dtype(d)) return d;
  fail(path, cat("tensor '", name, "' has unsupported dtype '", s, "'"));
}

// The data section's CRC-32, kept in the metadata so that flipped bytes are found on load
// (files from elsewhere, without it, still load).
constexpr const char* kChecksumKey = "ringflow.data_crc32";

uint32_t crc32_of(uint32_t crc, const void* data, size_t bytes) {
  const auto* p = static_cast<const Bytef*>(data);
  while (bytes > 0) {  // zlib takes uInt lengths
    const uInt n = static_cast<uInt>(std::min<size_t>(bytes, 1u << 30));
    crc = static_cast<uint32_t>(::crc32(crc, p, n));
    p += n;
    bytes -= n;
  }
  return crc;
}

// A regular file only: a directory, a FIFO (which would block) or a device is refused.
void check_regular_file(const std::string& path) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) fail(path, cat("cannot open: ", std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) fail(path, "not a regular file (a directory, FIFO or device)");
}

// A tensor's byte count, refusing shapes whose size overflows.
uint64_t tensor_bytes(const Shape& shape, DType dtype, const std::string& path,
                      const std::string& name) {
  for (int64_t s : shape)
    if (s < 0) fail(path, cat("tensor '", name, "' has a negative size in ", shape_str(shape)));
  int64_t numel = 0;
  try {
    numel = shape_numel(shape);
  } catch (const std::overflow_error&) {
    fail(path, cat("tensor '", name, "' has shape ", shape_str(shape), ", too large to exist"));
  }
  const uint64_t esize = dtype_size(dtype);
  if (static_cast<uint64_t>(numel) > UINT64_MAX / esize)
    fail(path, cat("tensor '", name, "' has shape ", shape_str(shape), ", too large to exist"));
  return static_cast<uint64_t>(numel) * esize;
}

// Verifies the data section against the checksum the writer kept, where it kept one.
void check_data_checksum(const SafetensorsFile& file, std::ifstream& in, uint64_t data_start,
                         uint64_t data_size) {
  const auto it = file.metadata.find(kChecksumKey);
  if (it == file.metadata.end()) return;
  uint32_t crc = crc32_of(0, nullptr, 0);
  std::vector<char> chunk(size_t{4} << 20);
  in.clear();
  in.seekg(static_cast<std::streamoff>(data_start));
  for (uint64_t left = data_size; left > 0;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(left, chunk.size()));
    if (!in.read(chunk.data(), static_cast<std::streamsize>(n))) fail(file.path, "truncated data section");
    crc = crc32_of(crc, chunk.data(), n);
    left -= n;
  }
  if (std::to_string(crc) != it->second)
    fail(file.path, cat("the data section's checksum is ", crc, ", the file says ", it->second,
                        ": the data is corrupt"));
}

}  // namespace

const Tensor& SafetensorsFile::at(const std::string& name) const {
  auto it = tensors.find(name);
  if (it == tensors.end()) throw std::runtime_error(cat(path, ": no tensor named '", name, "'"));
  return it->second;
}

namespace {

std::string megabytes(uint64_t bytes) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(1) << static_cast<double>(bytes) / 1e6 << " MB";
  return out.str();
}

// Writes `parts` to a new file at `tmp` and makes it durable (fsync). On any failure the
// file is removed again, so that a full disk or a failed write leaves nothing behind.
void write_durably(const std::string& tmp, const std::vector<std::pair<const void*, size_t>>& parts) {
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) fail(tmp, std::string("cannot open for writing: ") + std::strerror(errno));
  auto give_up = [&](const std::string& what) {
    const std::string err = std::strerror(errno);
    ::close(fd);
    ::unlink(tmp.c_str());
    fail(tmp, what + ": " + err);
  };
  for (auto [data, n] : parts) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = ::write(fd, p, n);
      if (w < 0) give_up("write failed");
      p += w;
      n -= static_cast<size_t>(w);
    }
  }
  if (::fsync(fd) != 0) give_up("fsync failed");
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    fail(tmp, std::string("close failed: ") + std::strerror(errno));
  }
}

}  // namespace

void check_free_space(const std::string& path, uint64_t bytes) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::string dir = parent.empty() ? "." : parent.string();
  struct statvfs fs{};
  if (::statvfs(dir.c_str(), &fs) != 0) return;  // cannot be known: the write will tell
  const uint64_t free = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
  if (free < bytes)
    fail(path, cat("not enough free space in ", dir, ": the file needs ", bytes, " bytes (",
                   megabytes(bytes), "), ", free, " bytes (", megabytes(free), ") are free"));
}

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error))
    fail(path, "is a folder: give the name of the file to write");
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  header["__metadata__"] = nlohmann::ordered_json::object();  // first, as other writers put it
  std::vector<Tensor> hosts;
  size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    RF_CHECK(name != "__metadata__", "save_safetensors: reserved tensor name '__metadata__'");
    Tensor h = t.detach().to(Device::cpu()).contiguous();
    const size_t bytes = h.numel() * dtype_size(h.dtype());
    header[name] = {{"dtype", safetensors_dtype(h.dtype())},
                    {"shape", h.shape()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    hosts.push_back(h);
  }
  uint32_t crc = crc32_of(0, nullptr, 0);
  for (const Tensor& h : hosts) crc = crc32_of(crc, h.raw_data(), h.numel() * dtype_size(h.dtype()));
  auto meta = metadata;
  meta[kChecksumKey] = std::to_string(crc);
  header["__metadata__"] = meta;
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');  // keep the data 8-byte aligned
  uint64_t len = json.size();
  unsigned char len_le[8];
  for (int i = 0; i < 8; ++i) len_le[i] = static_cast<unsigned char>(len >> (8 * i));
  std::vector<std::pair<const void*, size_t>> parts{{len_le, 8}, {json.data(), json.size()}};
  for (const Tensor& h : hosts) parts.emplace_back(h.raw_data(), h.numel() * dtype_size(h.dtype()));
  check_free_space(path, 8 + len + offset);
  const std::string tmp = path + ".tmp";
  write_durably(tmp, parts);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string err = std::strerror(errno);
    ::unlink(tmp.c_str());
    fail(path, "rename from " + tmp + " failed: " + err);
  }
  // The rename itself is durable only once the directory is synced.
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const int dir_fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
}

SafetensorsFile load_safetensors(const std::string& path) {
  check_regular_file(path);
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) fail(path, "cannot open (missing or unreadable)");
  const uint64_t file_size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  if (file_size < 8) fail(path, "truncated: shorter than the 8-byte header length");
  unsigned char len_le[8];
  if (!in.read(reinterpret_cast<char*>(len_le), 8)) fail(path, "cannot read the header length");
  uint64_t len = 0;
  for (int i = 0; i < 8; ++i) len |= static_cast<uint64_t>(len_le[i]) << (8 * i);
  if (len > file_size - 8) fail(path, cat("header length ", len, " exceeds the file size ", file_size));
  std::string json(len, '\0');
  if (!in.read(json.data(), static_cast<std::streamsize>(len))) fail(path, "truncated header");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(json);
  } catch (const std::exception& e) {
    fail(path, std::string("bad JSON header: ") + e.what());
  }
  if (!header.is_object()) fail(path, "header is not a JSON object");
  const uint64_t data_size = file_size - 8 - len;
  SafetensorsFile file;
  file.path = path;
  struct Range {
    uint64_t begin, end;
    std::string name;
  };
  std::vector<Range> ranges;
  for (auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) fail(path, "__metadata__ is not a JSON object");
      for (auto& [k, v] : entry.items()) file.metadata[k] = v.is_string() ? v.get<std::string>() : v.dump();
      continue;
    }
    try {
      const DType dtype = from_safetensors_dtype(entry.at("dtype").get<std::string>(), path, name);
      const Shape shape = entry.at("shape").get<Shape>();
      const auto offsets = entry.at("data_offsets").get<std::vector<uint64_t>>();
      const uint64_t bytes = tensor_bytes(shape, dtype, path, name);
      if (offsets.size() != 2 || offsets[0] > offsets[1] || offsets[1] > data_size ||
          offsets[1] - offsets[0] != bytes)
        fail(path, cat("tensor '", name, "' of shape ", shape_str(shape), " has byte range [",
                       offsets.size() == 2 ? offsets[0] : 0, ", ", offsets.size() == 2 ? offsets[1] : 0,
                       ") that does not fit its size or the data (", data_size, " bytes)"));
      ranges.push_back({offsets[0], offsets[1], name});
      Tensor t = empty(shape, dtype);
      in.seekg(static_cast<std::streamoff>(8 + len + offsets[0]));
      in.read(static_cast<char*>(t.raw_data()), static_cast<std::streamsize>(bytes));
      if (!in) fail(path, cat("truncated while reading tensor '", name, "'"));
      file.tensors.emplace(name, t);
    } catch (const nlohmann::json::exception& e) {
      fail(path, cat("bad header entry for '", name, "': ", e.what()));
    }
  }
  // Two tensors on the same bytes: an edited or corrupt header.
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  for (size_t k = 1; k < ranges.size(); ++k) {
    if (ranges[k].begin < ranges[k - 1].end)
      fail(path, cat("tensors '", ranges[k - 1].name, "' and '", ranges[k].name,
                     "' overlap in the data section"));
  }
  check_data_checksum(file, in, 8 + len, data_size);
  file.has_checksum = file.metadata.count(kChecksumKey) > 0;
  return file;
}

}  // namespace ringflow
