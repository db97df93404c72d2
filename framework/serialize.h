// safetensors files: an 8-byte little-endian header length, a JSON header naming each
// tensor's dtype, shape and byte range, then the raw little-endian data. Other tools
// (Python's safetensors, PyTorch fixtures written by tests/fixtures/*.py) read and write them.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ringflow/framework/tensor.h"

namespace ringflow {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Writes atomically: a temporary file in the same directory, fsync, then rename, so a crash
// never leaves a half-written file under `path`. Checks the free space first (where statvfs
// tells it); a write that fails all the same removes its temporary file. Throws
// std::runtime_error naming the file: a folder at `path`, too little space (bytes needed
// and free), a failed write.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

struct SafetensorsFile {
  std::map<std::string, Tensor> tensors;  // on the cpu, contiguous
  std::map<std::string, std::string> metadata;
  const Tensor& at(const std::string& name) const;  // throws naming the file and the name
  std::string path;
  bool has_checksum = false;  // the writer kept the data's CRC-32 (ringflow does), and it matched
};

// Throws std::runtime_error unless the file system holding `path` has `bytes` free for it,
// naming the folder, the bytes needed and the bytes free. Where statvfs fails, nothing.
void check_free_space(const std::string& path, uint64_t bytes);

// Throws std::runtime_error naming the file and the problem (missing, truncated, bad header,
// unknown dtype, byte range outside the data), what the file holds escaped (printable.h).
SafetensorsFile load_safetensors(const std::string& path);

}  // namespace ringflow
