#include "ringflow/framework/serialize.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ringflow/framework/ops.h"

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

DType from_safetensors_dtype(const std::string& s, const std::string& path, const std::string& name) {
  for (DType d : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64})
    if (s == safetensors_dtype(d)) return d;
  throw std::runtime_error(cat(path, ": tensor '", name, "' has unsupported dtype '", s, "'"));
}

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error(cat(path, ": ", what));
}

}  // namespace

const Tensor& SafetensorsFile::at(const std::string& name) const {
  auto it = tensors.find(name);
  if (it == tensors.end()) throw std::runtime_error(cat(path, ": no tensor named '", name, "'"));
  return it->second;
}

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
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
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');  // keep the data 8-byte aligned
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) fail(tmp, std::string("cannot open for writing: ") + std::strerror(errno));
  auto write_all = [&](const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = ::write(fd, p, n);
      if (w < 0) {
        const std::string err = std::strerror(errno);
        ::close(fd);
        fail(tmp, "write failed: " + err);
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
  };
  uint64_t len = json.size();
  unsigned char len_le[8];
  for (int i = 0; i < 8; ++i) len_le[i] = static_cast<unsigned char>(len >> (8 * i));
  write_all(len_le, 8);
  write_all(json.data(), json.size());
  for (const Tensor& h : hosts) write_all(h.raw_data(), h.numel() * dtype_size(h.dtype()));
  if (::fsync(fd) != 0 || ::close(fd) != 0) fail(tmp, std::string("fsync/close failed: ") + std::strerror(errno));
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    fail(path, std::string("rename from ") + tmp + " failed: " + std::strerror(errno));
  // The rename itself is durable only once the directory is synced.
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const int dir_fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
}

SafetensorsFile load_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) fail(path, "cannot open (missing or unreadable)");
  const uint64_t file_size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  if (file_size < 8) fail(path, "truncated: shorter than the 8-byte header length");
  unsigned char len_le[8];
  in.read(reinterpret_cast<char*>(len_le), 8);
  uint64_t len = 0;
  for (int i = 0; i < 8; ++i) len |= static_cast<uint64_t>(len_le[i]) << (8 * i);
  if (len > file_size - 8) fail(path, cat("header length ", len, " exceeds the file size ", file_size));
  std::string json(len, '\0');
  in.read(json.data(), static_cast<std::streamsize>(len));
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
  for (auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      for (auto& [k, v] : entry.items()) file.metadata[k] = v.is_string() ? v.get<std::string>() : v.dump();
      continue;
    }
    try {
      const DType dtype = from_safetensors_dtype(entry.at("dtype").get<std::string>(), path, name);
      const Shape shape = entry.at("shape").get<Shape>();
      const auto offsets = entry.at("data_offsets").get<std::vector<uint64_t>>();
      for (int64_t s : shape)
        if (s < 0) fail(path, cat("tensor '", name, "' has a negative size"));
      const uint64_t bytes = static_cast<uint64_t>(shape_numel(shape)) * dtype_size(dtype);
      if (offsets.size() != 2 || offsets[0] > offsets[1] || offsets[1] > data_size ||
          offsets[1] - offsets[0] != bytes)
        fail(path, cat("tensor '", name, "' of shape ", shape_str(shape), " has byte range [",
                       offsets.size() == 2 ? offsets[0] : 0, ", ", offsets.size() == 2 ? offsets[1] : 0,
                       ") that does not fit its size or the data (", data_size, " bytes)"));
      Tensor t = empty(shape, dtype);
      in.seekg(static_cast<std::streamoff>(8 + len + offsets[0]));
      in.read(static_cast<char*>(t.raw_data()), static_cast<std::streamsize>(bytes));
      if (!in) fail(path, cat("truncated while reading tensor '", name, "'"));
      file.tensors.emplace(name, t);
    } catch (const nlohmann::json::exception& e) {
      fail(path, cat("bad header entry for '", name, "': ", e.what()));
    }
  }
  return file;
}

}  // namespace ringflow
