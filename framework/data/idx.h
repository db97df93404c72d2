// Readers for IDX files, the format of MNIST and Fashion-MNIST (Debian's
// dataset-fashion-mnist installs them in /usr/share/datasets/fashion-mnist), gzip-compressed
// or plain. Only unsigned-byte data (type 0x08) is supported; every error names the file.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace ringflow::data {

// An IDX file's contents: shape from the header, row-major bytes.
struct IdxArray {
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;  // product(shape) bytes
};

// Reads one IDX file (gzip or plain; zlib tells them apart). Throws std::runtime_error
// naming the file and the problem: missing file, truncated header, wrong magic,
// unsupported type byte, data shorter than the header says, trailing data, or a header
// announcing more than 4 GiB. Memory grows with the bytes actually read, never with what
// a corrupt header claims.
IdxArray read_idx(const std::string& path);

// A labelled set: images (N, ...) and labels (N), each label < num_classes.
struct IdxDataset {
  IdxArray images, labels;
};

// Reads both files and checks that the labels are 1-D, that the counts match and that every
// label is below num_classes (1..256); throws std::runtime_error naming the file otherwise.
IdxDataset read_idx_pair(const std::string& images_path, const std::string& labels_path,
                         int64_t num_classes = 10);

}  // namespace ringflow::data
