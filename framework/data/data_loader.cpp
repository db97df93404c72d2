#include "ringflow/framework/data/data_loader.h"

#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include "ringflow/framework/ops.h"
#include "ringflow/framework/random.h"

namespace ringflow::data {
namespace {

uint64_t mix(uint64_t z) {  // SplitMix64's finaliser
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The seed of the transforms of the example at `position` of epoch `epoch`.
uint64_t example_seed(uint64_t seed, int64_t epoch, int64_t position) {
  return mix(mix(seed ^ 0x7f4a7c159e3779b9ull) + static_cast<uint64_t>(epoch)) +
         static_cast<uint64_t>(position);
}

}  // namespace

struct DataLoader::Run {
  const DataLoader* loader;
  int64_t epoch;
  std::vector<int64_t> order;           // a Dataset's: the sampler's indices
  std::unique_ptr<RecordStream> stream;  // an IterableDataset's
  std::mutex stream_mutex;               // claiming a batch and reading its records, in order
  int64_t epoch_size = 0;
  int64_t num_batches;
  int64_t depth;

  std::mutex mutex;
  std::condition_variable changed;
  bool stopping = false;
  int64_t next_to_build = 0;  // guarded by mutex
  int64_t next_to_take = 0;   // guarded by mutex
  struct Result {
    Batch batch;
    std::exception_ptr error;
  };
  std::map<int64_t, Result> ready;  // built, not yet taken
  std::vector<std::thread> workers;

  // Batch k's records, read from the stream (batches claimed in order, so they come in order).
  std::vector<Record> take_records(int64_t k) {
    const int64_t b = loader->options().batch_size;
    std::vector<Record> records(static_cast<size_t>(std::min(b, epoch_size - k * b)));
    for (Record& r : records)
      if (!stream->next(r))
        throw std::runtime_error(cat("DataLoader: the data set's stream ended before the ", epoch_size,
                                     " records its size() promised"));
    return records;
  }

  Batch build(int64_t k, std::vector<Record>& records) {
    return stream ? loader->build_batch(records, epoch, k) : loader->build_batch(order, epoch, k);
  }

  void work() {
    for (;;) {
      int64_t k;
      Result result;
      std::vector<Record> records;
      {
        std::unique_lock in_order(stream_mutex, std::defer_lock);
        if (stream) in_order.lock();
        {
          std::unique_lock lock(mutex);
          changed.wait(lock, [&] {
            return stopping || next_to_build >= num_batches || next_to_build < next_to_take + depth;
          });
          if (stopping || next_to_build >= num_batches) return;
          k = next_to_build++;
        }
        try {
          if (stream) records = take_records(k);
        } catch (...) {
          result.error = std::current_exception();
        }
      }
      try {
        if (!result.error) result.batch = build(k, records);
      } catch (...) {
        result.error = std::current_exception();
      }
      {
        std::lock_guard lock(mutex);
        ready.emplace(k, std::move(result));
      }
      changed.notify_all();
    }
  }

  ~Run() {
    {
      std::lock_guard lock(mutex);
      stopping = true;
    }
    changed.notify_all();
    for (std::thread& t : workers) t.join();
  }
};

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)) {
  RF_CHECK(dataset_ != nullptr, "DataLoader: null dataset");
  RF_CHECK(options_.batch_size >= 1, "DataLoader: batch_size must be positive, got ", options_.batch_size);
  RF_CHECK(options_.num_workers >= 0, "DataLoader: negative num_workers ", options_.num_workers);
  RF_CHECK(options_.prefetch_batches >= 1, "DataLoader: prefetch_batches must be positive, got ",
           options_.prefetch_batches);
  for (const auto& t : options_.transforms) RF_CHECK(t != nullptr, "DataLoader: null transform");
  stream_ = std::dynamic_pointer_cast<const IterableDataset>(dataset_);
  RF_CHECK(!(stream_ && options_.sampler), "DataLoader: an IterableDataset is read in its own order (and "
           "split among ranks by itself), not by a sampler");
  sampler_ = options_.sampler;
  if (stream_) {
  } else if (!sampler_) {
    if (options_.shuffle) sampler_ = std::make_shared<RandomSampler>(dataset_->size(), options_.seed);
    else sampler_ = std::make_shared<SequentialSampler>(dataset_->size());
  }
}

DataLoader::~DataLoader() { stop(); }

void DataLoader::stop() { run_.reset(); }

int64_t DataLoader::epoch_size() const { return stream_ ? stream_->size() : sampler_->size(); }

int64_t DataLoader::num_batches() const {
  const int64_t n = epoch_size(), b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

template <class ReadOne>
Batch DataLoader::fill_batch(int64_t epoch, int64_t k, int64_t count, const ReadOne& read_one) const {
  const int64_t begin = k * options_.batch_size;
  RF_CHECK(begin >= 0 && count > 0, "DataLoader: batch ", k, " outside the epoch");
  const Shape shape = dataset_->image_shape();
  const int64_t numel = shape_numel(shape);
  Shape batch_shape{count};
  batch_shape.insert(batch_shape.end(), shape.begin(), shape.end());
  Batch batch;
  batch.index = k;
  batch.images = empty(batch_shape, DType::f32);
  batch.labels = empty({count}, DType::i64);
  float* images = batch.images.data<float>();
  int64_t* labels = batch.labels.data<int64_t>();
  const int64_t classes = dataset_->num_classes();
  int64_t kept = 0;  // examples written so far (bad ones skipped)
  for (int64_t j = 0; j < count; ++j) {
    float* image = images + kept * numel;
    Generator gen(example_seed(options_.seed, epoch, begin + j));
    int64_t label;
    try {
      label = read_one(j, image, gen);
    } catch (const BadExample& e) {
      if (!options_.skip_bad_examples) throw;
      batch.skipped.push_back(e.what());
      continue;
    }
    RF_CHECK(label >= 0 && label < classes, "DataLoader: example ", begin + j, " of the epoch has label ", label,
             ", outside [0, ", classes, ")");
    labels[kept] = label;
    for (const auto& t : options_.transforms) t->apply(image, shape, gen);
    ++kept;
  }
  if (kept < count) {
    if (kept == 0)
      throw std::runtime_error(cat("DataLoader: all ", count, " examples of batch ", k, " are bad, the first: ",
                                   batch.skipped.front()));
    batch.images = batch.images.narrow(0, 0, kept);
    batch.labels = batch.labels.narrow(0, 0, kept);
  }
  return batch;
}

Batch DataLoader::build_batch(const std::vector<int64_t>& order, int64_t epoch, int64_t k) const {
  const int64_t n = static_cast<int64_t>(order.size()), begin = k * options_.batch_size;
  const int64_t size = dataset_->size();
  return fill_batch(epoch, k, std::min(options_.batch_size, n - begin), [&](int64_t j, float* dst, Generator& gen) {
    const int64_t i = order[static_cast<size_t>(begin + j)];
    RF_CHECK(i >= 0 && i < size, "DataLoader: sampler index ", i, " outside the data set of ", size, " examples");
    return dataset_->read(i, dst, gen);
  });
}

Batch DataLoader::build_batch(const std::vector<Record>& records, int64_t epoch, int64_t k) const {
  RF_CHECK(stream_, "DataLoader: records given for a data set that is not an IterableDataset");
  return fill_batch(epoch, k, static_cast<int64_t>(records.size()), [&](int64_t j, float* dst, Generator& gen) {
    return stream_->decode(records[static_cast<size_t>(j)], dst, gen);
  });
}

void DataLoader::start_epoch(int64_t epoch, int64_t first_batch) {
  stop();
  auto run = std::make_unique<Run>();
  run->loader = this;
  run->epoch = epoch;
  if (stream_) {
    run->stream = stream_->open(epoch);
  } else {
    run->order = sampler_->indices(epoch);
    RF_CHECK(static_cast<int64_t>(run->order.size()) == sampler_->size(), "DataLoader: the sampler gave ",
             run->order.size(), " indices for epoch ", epoch, ", its size() says ", sampler_->size());
  }
  const int64_t n = epoch_size(), b = options_.batch_size;
  run->epoch_size = n;
  run->num_batches = options_.drop_last ? n / b : (n + b - 1) / b;
  RF_CHECK(first_batch >= 0 && first_batch <= run->num_batches, "DataLoader: epoch ", epoch,
           " cannot start at batch ", first_batch, ": it has ", run->num_batches);
  run->next_to_build = run->next_to_take = first_batch;
  // A stream has no index: the records of the batches before are read and dropped, undecoded.
  if (run->stream)
    for (int64_t k = 0; k < first_batch; ++k) run->take_records(k);
  run->depth = std::max<int64_t>(options_.prefetch_batches, options_.num_workers);
  run_ = std::move(run);
  for (int w = 0; w < options_.num_workers; ++w) run_->workers.emplace_back([r = run_.get()] { r->work(); });
}

bool DataLoader::next(Batch& batch) {
  if (!run_) return false;
  Run& r = *run_;
  if (options_.num_workers == 0) {
    if (r.next_to_take >= r.num_batches) return false;
    const int64_t k = r.next_to_take++;
    std::vector<Record> records;
    if (r.stream) records = r.take_records(k);
    batch = r.build(k, records);
    return true;
  }
  Run::Result result;
  {
    std::unique_lock lock(r.mutex);
    if (r.next_to_take >= r.num_batches) return false;
    r.changed.wait(lock, [&] { return r.ready.count(r.next_to_take) > 0; });
    auto it = r.ready.find(r.next_to_take);
    result = std::move(it->second);
    r.ready.erase(it);
    ++r.next_to_take;
  }
  r.changed.notify_all();
  if (result.error) {
    stop();  // the epoch cannot go on past a failed batch
    std::rethrow_exception(result.error);
  }
  batch = std::move(result.batch);
  return true;
}

DataLoader::Iterator DataLoader::EpochRange::begin() { return Iterator(loader); }

DataLoader::EpochRange DataLoader::epoch(int64_t e) {
  start_epoch(e);
  return EpochRange{this};
}

}  // namespace ringflow::data
