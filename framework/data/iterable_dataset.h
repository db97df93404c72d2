// IterableDataset: a data set read as a stream (PyTorch's name), in an order the stream itself
// decides, e.g. tar shards read front to back, rather than by index. An epoch's examples come
// as records (a file's bytes and its label), read in order by one thread at a time; a record
// becomes an example (decoded, transformed) in any thread. The DataLoader reads each batch's
// records from the epoch's stream in batch order and decodes them in its workers, so that the
// batches do not depend on the number of workers.
//
// It is a Dataset for what the two share (size, image shape, classes); read(i) by index
// throws: only a DataLoader reads it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ringflow/framework/data/dataset.h"

namespace ringflow::data {

struct Record {
  std::string name;  // where it came from, for messages (shard:member)
  std::vector<uint8_t> bytes;
  int64_t label = 0;
};

class RecordStream {
 public:
  virtual ~RecordStream() = default;
  // The next record; false when the epoch's records are all read. Not thread-safe.
  virtual bool next(Record& record) = 0;
};

class IterableDataset : public Dataset {
 public:
  // size(): the records of one epoch (each epoch the same count).
  // The records of epoch `epoch`, size() of them.
  virtual std::unique_ptr<RecordStream> open(int64_t epoch) const = 0;
  // Writes the record's example (image_shape(), f32) to dst and returns its label; draws its
  // random transforms from gen. Thread-safe. Throws BadExample for a record that cannot be
  // decoded.
  virtual int64_t decode(const Record& record, float* dst, Generator& gen) const = 0;

  int64_t read(int64_t i, float* dst) const override;  // throws: streams are read in order
};

}  // namespace ringflow::data
