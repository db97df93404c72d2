// CIFAR-10 in its binary form (https://www.cs.toronto.edu/~kriz/cifar.html): each file holds
// 10000 records of 1 label byte (0-9) and 3072 pixel bytes (the red, green, blue planes of a
// 32x32 image, row-major), i.e. an image in (C, H, W) order. The training set is
// data_batch_1.bin .. data_batch_5.bin, the test set test_batch.bin.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ringflow/framework/data/dataset.h"

namespace ringflow::data {

constexpr int64_t kCifar10RecordBytes = 1 + 3 * 32 * 32;
constexpr int64_t kCifar10RecordsPerFile = 10000;

class Cifar10 : public ByteImageDataset {
 public:
  // Reads the files in order. records_per_file: the count each file must hold (0: any
  // positive count, for small test files). Throws std::runtime_error naming the file and
  // the problem: missing or unreadable, a size that is not a whole number of records
  // (truncated, or not CIFAR-10), fewer or more records than records_per_file, a label
  // above 9 (with the record's index).
  explicit Cifar10(const std::vector<std::string>& files,
                   int64_t records_per_file = kCifar10RecordsPerFile);

  // The training (data_batch_1..5.bin) or test (test_batch.bin) files in dir.
  static std::shared_ptr<Cifar10> open(const std::string& dir, bool train,
                                       int64_t records_per_file = kCifar10RecordsPerFile);
  static std::vector<std::string> file_names(bool train);

 private:
  struct Loaded;
  static Loaded load(const std::vector<std::string>& files, int64_t records_per_file);
  explicit Cifar10(Loaded&& loaded);
};

}  // namespace ringflow::data
