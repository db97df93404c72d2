// DataLoader: batches of a Dataset in a seeded order, built ahead of the consumer by worker
// threads so that loading overlaps compute.
//
// Determinism: an epoch's batches depend only on (dataset, options, epoch): the order comes
// from the sampler (default: a permutation seeded by seed + epoch, or 0..n-1 without
// shuffle), and each example's random transforms from a Generator seeded by (seed, epoch,
// position in the epoch), which the dataset's read() draws from first (a random crop taken
// while decoding) and the transforms after it. The number of workers and the prefetch depth
// change timing only.
//
// An IterableDataset (tar shards) has no sampler: each batch's records are read from the
// epoch's stream in batch order, one worker at a time, and decoded in parallel.
//
// Bad examples: a dataset's BadExample (a corrupt file) stops the epoch with its message,
// or with skip_bad_examples is dropped from its batch (which comes out smaller) and its
// message kept in Batch::skipped.
//
// Threading: start_epoch() starts num_workers threads that build batches in order of need,
// at most prefetch_batches ahead of the one the caller takes next; next() returns them in
// order. A worker's exception is rethrown by next() for the batch it was building. Starting
// another epoch or destroying the loader stops and joins the workers (a batch being built is
// finished and dropped). One consumer thread: next()/start_epoch() are not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ringflow/framework/data/dataset.h"
#include "ringflow/framework/data/iterable_dataset.h"
#include "ringflow/framework/data/sampler.h"
#include "ringflow/framework/data/transforms.h"

namespace ringflow::data {

struct DataLoaderOptions {
  int64_t batch_size = 64;
  bool shuffle = true;       // used when no sampler is given
  bool drop_last = false;    // drop a last batch smaller than batch_size
  uint64_t seed = 0;         // shuffle order and random transforms
  int num_workers = 1;       // batch-building threads; 0 builds each batch inside next()
  int prefetch_batches = 2;  // batches built ahead of the consumer (at least num_workers)
  std::vector<std::shared_ptr<const Transform>> transforms = {};  // applied in order per example
  std::shared_ptr<const Sampler> sampler = nullptr;  // e.g. a DistributedSampler; overrides shuffle
  bool skip_bad_examples = false;  // drop a BadExample from its batch instead of failing
};

struct Batch {
  Tensor images;      // (B, C, H, W) f32, contiguous
  Tensor labels;      // (B) i64
  int64_t index = 0;  // batch number within the epoch
  std::vector<std::string> skipped = {};  // skip_bad_examples: why each dropped example was bad
};

class DataLoader {
 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options = {});
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Examples per epoch (the sampler's count) and batches per epoch.
  int64_t epoch_size() const;
  int64_t num_batches() const;
  const Dataset& dataset() const { return *dataset_; }
  const DataLoaderOptions& options() const { return options_; }

  // Starts epoch `epoch` at batch `first_batch` (a run resumed in the middle of an epoch:
  // the same batches as the uninterrupted epoch's from there on; an IterableDataset's stream
  // is read through the batches before, undecoded), dropping what is left of the previous one. Throws std::invalid_argument for a first_batch outside [0, num_batches()].
  void start_epoch(int64_t epoch, int64_t first_batch = 0);
  // Fills `batch` with the next batch of the current epoch; false when the epoch is over
  // (or none was started). Rethrows a worker's exception.
  bool next(Batch& batch);

  // Range-for over one epoch: for (const Batch& b : loader.epoch(3)) { ... }
  class Iterator;
  struct EpochRange {
    DataLoader* loader;
    Iterator begin();
    std::nullptr_t end() { return nullptr; }
  };
  EpochRange epoch(int64_t epoch);

  class Iterator {
   public:
    explicit Iterator(DataLoader* loader) : loader_(loader) { ++*this; }
    const Batch& operator*() const { return batch_; }
    const Batch* operator->() const { return &batch_; }
    Iterator& operator++() {
      if (loader_ && !loader_->next(batch_)) loader_ = nullptr;
      return *this;
    }
    bool operator!=(std::nullptr_t) const { return loader_ != nullptr; }

   private:
    DataLoader* loader_;
    Batch batch_;
  };

  // Builds batch k of `order` for `epoch` in the caller's thread (what each worker runs).
  Batch build_batch(const std::vector<int64_t>& order, int64_t epoch, int64_t k) const;
  // The same for an IterableDataset: batch k from its records, in stream order.
  Batch build_batch(const std::vector<Record>& records, int64_t epoch, int64_t k) const;

 private:
  struct Run;  // one epoch's shared state and worker threads
  void stop();
  // Batch k of `count` examples, example j written by read_one(j, dst, gen) (returns its label).
  template <class ReadOne>
  Batch fill_batch(int64_t epoch, int64_t k, int64_t count, const ReadOne& read_one) const;

  std::shared_ptr<const Dataset> dataset_;
  std::shared_ptr<const IterableDataset> stream_;  // dataset_ when it is one
  DataLoaderOptions options_;
  std::shared_ptr<const Sampler> sampler_;
  std::unique_ptr<Run> run_;
};

}  // namespace ringflow::data
