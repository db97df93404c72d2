// A minimal safetensors reader for test fixtures (F64/F32/I64 little-endian tensors plus
// the string metadata). Temporary: the framework's serializer will replace it.
// Format: u64 LE header length, JSON header {name: {dtype, shape, data_offsets}}, data.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ringflow::testing {

struct StoredTensor {
  std::string dtype;            // "F64", "F32", "I64"
  std::vector<int64_t> shape;
  std::vector<unsigned char> bytes;  // row-major, little-endian (the host's order here)

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    return n;
  }
  // Element i converted to double / int64.
  double f64(int64_t i) const {
    if (dtype == "F64") return read<double>(i);
    if (dtype == "F32") return read<float>(i);
    if (dtype == "I64") return static_cast<double>(read<int64_t>(i));
    throw std::runtime_error("safetensors: unsupported dtype " + dtype);
  }
  int64_t i64(int64_t i) const {
    return dtype == "I64" ? read<int64_t>(i) : static_cast<int64_t>(f64(i));
  }

 private:
  template <class T> T read(int64_t i) const {
    T v;
    std::memcpy(&v, bytes.data() + i * sizeof(T), sizeof(T));
    return v;
  }
};

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error("safetensors: cannot open " + path);
    unsigned char len_bytes[8];
    f.read(reinterpret_cast<char*>(len_bytes), 8);
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];
    std::string header(header_len, '\0');
    f.read(header.data(), static_cast<std::streamsize>(header_len));
    std::vector<unsigned char> data((std::istreambuf_iterator<char>(f)),
                                    std::istreambuf_iterator<char>());
    if (!f.eof() && f.fail()) throw std::runtime_error("safetensors: short read " + path);

    const nlohmann::json j = nlohmann::json::parse(header);
    for (const auto& [name, entry] : j.items()) {
      if (name == "__metadata__") {
        for (const auto& [k, v] : entry.items()) metadata_[k] = v.get<std::string>();
        continue;
      }
      StoredTensor t;
      t.dtype = entry.at("dtype").get<std::string>();
      t.shape = entry.at("shape").get<std::vector<int64_t>>();
      const auto offsets = entry.at("data_offsets").get<std::vector<uint64_t>>();
      if (offsets.size() != 2 || offsets[1] < offsets[0] || offsets[1] > data.size()) {
        throw std::runtime_error("safetensors: bad data_offsets for " + name);
      }
      t.bytes.assign(data.begin() + static_cast<std::ptrdiff_t>(offsets[0]),
                     data.begin() + static_cast<std::ptrdiff_t>(offsets[1]));
      tensors_.emplace(name, std::move(t));
    }
  }

  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  const StoredTensor& at(const std::string& name) const {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) throw std::runtime_error("safetensors: no tensor " + name);
    return it->second;
  }
  const std::map<std::string, StoredTensor>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::map<std::string, StoredTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace ringflow::testing
