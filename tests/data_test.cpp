// framework/data: the CIFAR-10 reader on files the test writes in that format and on
// corrupted copies (errors name the file and the problem), the MNIST reader on Debian's
// Fashion-MNIST, transforms on small known images, the DistributedSampler partition against
// torch.utils.data.DistributedSampler (tests/fixtures/data.safetensors, written by
// make_data.py), and DataLoader determinism, drop_last, prefetching and worker errors.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "ringflow/framework/data/data.h"
#include "ringflow/tests/torch_compare.h"

namespace fs = std::filesystem;
using namespace ringflow;
using namespace ringflow::data;
using json = nlohmann::json;

namespace {

using Bytes = std::vector<uint8_t>;

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("ringflow_data_test_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

const TempDir& temp_dir() {
  static TempDir dir;
  return dir;
}

// A fresh sub-directory of the temp dir.
fs::path make_dir(const std::string& name) {
  const fs::path p = temp_dir().path / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

void write_bytes(const fs::path& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

// The pixel byte of record r of file f at offset j (of 3072).
uint8_t pixel(int f, int64_t r, int64_t j) { return static_cast<uint8_t>((f * 131 + r * 7 + j * 3) % 256); }
uint8_t label_of(int f, int64_t r) { return static_cast<uint8_t>((f + r) % 10); }

// A CIFAR-10 binary file of `records` records: file index f makes its contents distinct.
Bytes cifar_file(int f, int64_t records) {
  Bytes out;
  out.reserve(static_cast<size_t>(records * kCifar10RecordBytes));
  for (int64_t r = 0; r < records; ++r) {
    out.push_back(label_of(f, r));
    for (int64_t j = 0; j < 3072; ++j) out.push_back(pixel(f, r, j));
  }
  return out;
}

// Writes data_batch_1..5.bin (f = 1..5) and test_batch.bin (f = 0) with `records` each.
fs::path write_cifar_dir(const std::string& name, int64_t records) {
  const fs::path dir = make_dir(name);
  for (int f = 1; f <= 5; ++f) write_bytes(dir / ("data_batch_" + std::to_string(f) + ".bin"), cifar_file(f, records));
  write_bytes(dir / "test_batch.bin", cifar_file(0, records));
  return dir;
}

// Runs fn, which must throw std::runtime_error whose message contains every needle.
template <class Fn>
void check_error(Fn&& fn, const std::vector<std::string>& needles) {
  try {
    fn();
    FAIL("no error");
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    for (const std::string& needle : needles) CHECK_MESSAGE(msg.find(needle) != std::string::npos, "'" << needle << "' not in: " << msg);
  }
}

// Example i's image is filled with i; its label is i % 7.
class IndexDataset : public Dataset {
 public:
  IndexDataset(int64_t n, Shape shape = {1, 2, 2}, int64_t throw_at = -1)
      : n_(n), shape_(std::move(shape)), throw_at_(throw_at) {}
  int64_t size() const override { return n_; }
  Shape image_shape() const override { return shape_; }
  int64_t num_classes() const override { return 7; }
  int64_t read(int64_t i, float* dst) const override {
    if (i == throw_at_) throw std::runtime_error("IndexDataset: broken example " + std::to_string(i));
    std::fill(dst, dst + shape_numel(shape_), static_cast<float>(i));
    return i % 7;
  }

 private:
  int64_t n_;
  Shape shape_;
  int64_t throw_at_;
};

// The example indices of a batch of an IndexDataset.
std::vector<int64_t> batch_indices(const Batch& b) {
  std::vector<int64_t> out;
  const int64_t per = b.images.numel() / b.images.size(0);
  const float* p = b.images.data<float>();
  for (int64_t j = 0; j < b.images.size(0); ++j) out.push_back(static_cast<int64_t>(p[j * per]));
  return out;
}

std::vector<Batch> take_epoch(DataLoader& loader, int64_t epoch) {
  std::vector<Batch> out;
  for (const Batch& b : loader.epoch(epoch)) out.push_back(b);
  return out;
}

bool same_batches(const std::vector<Batch>& a, const std::vector<Batch>& b) {
  if (a.size() != b.size()) return false;
  for (size_t k = 0; k < a.size(); ++k) {
    if (a[k].index != b[k].index || a[k].images.shape() != b[k].images.shape()) return false;
    if (a[k].images.to_vector<float>() != b[k].images.to_vector<float>()) return false;
    if (a[k].labels.to_vector<int64_t>() != b[k].labels.to_vector<int64_t>()) return false;
  }
  return true;
}

std::vector<std::shared_ptr<const Transform>> cifar_augmentation() {
  return {std::make_shared<RandomCrop>(2), std::make_shared<RandomHorizontalFlip>(),
          std::make_shared<Normalize>(std::vector<float>{0.5f, 0.4f, 0.3f}, std::vector<float>{0.2f, 0.25f, 0.3f})};
}

}  // namespace

TEST_CASE("CIFAR-10: reads the training and test files in record order") {
  const fs::path dir = write_cifar_dir("cifar_small", 7);
  const auto train = Cifar10::open(dir.string(), /*train=*/true, /*records_per_file=*/7);
  REQUIRE(train->size() == 35);
  CHECK(train->image_shape() == Shape{3, 32, 32});
  CHECK(train->num_classes() == 10);
  for (int64_t i : {0, 6, 7, 20, 34}) {
    const int f = static_cast<int>(i / 7) + 1;
    const int64_t r = i % 7;
    const Example e = train->get(i);
    CHECK(e.label == label_of(f, r));
    const std::vector<float> v = e.image.to_vector<float>();
    for (int64_t j : {0, 1, 1023, 1024, 2047, 3071})  // R, G and B planes
      CHECK(v[j] == static_cast<float>(pixel(f, r, j)) / 255.0f);
  }
  const auto test = Cifar10::open(dir.string(), /*train=*/false, 7);
  CHECK(test->size() == 7);
  CHECK(test->get(3).label == label_of(0, 3));
  // records_per_file = 0 accepts any whole number of records.
  CHECK(Cifar10({(dir / "test_batch.bin").string()}, 0).size() == 7);
}

TEST_CASE("CIFAR-10: a full-size file (10000 records) with the default record count") {
  const fs::path dir = make_dir("cifar_full");
  write_bytes(dir / "test_batch.bin", cifar_file(0, kCifar10RecordsPerFile));
  const auto test = Cifar10::open(dir.string(), /*train=*/false);
  CHECK(test->size() == 10000);
  CHECK(test->get(9999).label == label_of(0, 9999));
  // The same file is "too short" for nothing, but the 7-record files are for the default.
  const fs::path small = write_cifar_dir("cifar_small_default", 7);
  check_error([&] { Cifar10::open(small.string(), true); },
              {(small / "data_batch_1.bin").string(), "truncated: 7 records, expected 10000"});
}

TEST_CASE("CIFAR-10: broken files give errors naming the file and the problem") {
  const fs::path dir = write_cifar_dir("cifar_broken", 7);
  const std::string batch3 = (dir / "data_batch_3.bin").string();
  const Bytes good = cifar_file(3, 7);

  SUBCASE("missing file") {
    fs::remove(batch3);
    check_error([&] { Cifar10::open(dir.string(), true, 7); }, {batch3, "cannot open", "No such file"});
  }
  SUBCASE("size not a whole number of records") {
    write_bytes(batch3, Bytes(good.begin(), good.end() - 100));
    check_error([&] { Cifar10::open(dir.string(), true, 7); },
                {batch3, "not a whole number of 3073-byte records", "6 records and 2973 bytes left over"});
  }
  SUBCASE("fewer records than a file holds") {
    write_bytes(batch3, Bytes(good.begin(), good.end() - kCifar10RecordBytes));
    check_error([&] { Cifar10::open(dir.string(), true, 7); }, {batch3, "truncated: 6 records, expected 7"});
  }
  SUBCASE("more records than a file holds") {
    write_bytes(batch3, cifar_file(3, 8));
    check_error([&] { Cifar10::open(dir.string(), true, 7); }, {batch3, "too long: 8 records, expected 7"});
  }
  SUBCASE("label out of range") {
    Bytes bad = good;
    bad[4 * kCifar10RecordBytes] = 10;
    write_bytes(batch3, bad);
    check_error([&] { Cifar10::open(dir.string(), true, 7); },
                {batch3, "label out of range: label 10 in record 4", "byte offset 12292"});
  }
  SUBCASE("empty file") {
    write_bytes(batch3, {});
    check_error([&] { Cifar10::open(dir.string(), true, 7); }, {batch3, "empty file"});
  }
  SUBCASE("missing directory") {
    check_error([&] { Cifar10::open((dir / "nope").string(), false); }, {"nope/test_batch.bin", "cannot open"});
  }
}

TEST_CASE("MNIST reader: Fashion-MNIST test set from Debian's package") {
  if (!fs::exists(std::string(kFashionMnistDir) + "/t10k-images-idx3-ubyte.gz")) {
    MESSAGE("SKIP: dataset-fashion-mnist is not installed in " << kFashionMnistDir);
    return;
  }
  const auto test = Mnist::open(kFashionMnistDir, /*train=*/false);
  CHECK(test->size() == 10000);
  CHECK(test->image_shape() == Shape{1, 28, 28});
  const Example e = test->get(0);
  CHECK(e.label == 9);  // the first test image is an ankle boot
  const std::vector<float> v = e.image.to_vector<float>();
  CHECK(*std::min_element(v.begin(), v.end()) >= 0.0f);
  CHECK(*std::max_element(v.begin(), v.end()) <= 1.0f);
  check_error([] { Mnist::open("/nonexistent_ringflow_dir", true); },
              {"/nonexistent_ringflow_dir/train-images-idx3-ubyte.gz", "missing file"});
}

TEST_CASE("transforms on small known images") {
  Generator gen(1);
  SUBCASE("Normalize per channel") {
    std::vector<float> img{1, 2, 3, 4, 10, 20, 30, 40};  // (2, 2, 2)
    Normalize({1.0f, 10.0f}, {2.0f, 5.0f}).apply(img.data(), {2, 2, 2}, gen);
    CHECK(img == std::vector<float>{0, 0.5f, 1, 1.5f, 0, 2, 4, 6});
    CHECK_THROWS_AS(Normalize({1, 2, 3}, {1, 1, 1}).apply(img.data(), {2, 2, 2}, gen), std::invalid_argument);
  }
  SUBCASE("RandomHorizontalFlip") {
    std::vector<float> img{1, 2, 3, 4, 5, 6};  // (1, 2, 3)
    RandomHorizontalFlip(1.0).apply(img.data(), {1, 2, 3}, gen);
    CHECK(img == std::vector<float>{3, 2, 1, 6, 5, 4});
    RandomHorizontalFlip(0.0).apply(img.data(), {1, 2, 3}, gen);
    CHECK(img == std::vector<float>{3, 2, 1, 6, 5, 4});
    int flips = 0;
    for (uint64_t s = 0; s < 1000; ++s) {
      std::vector<float> x{1, 2};
      Generator g(s);
      RandomHorizontalFlip().apply(x.data(), {1, 1, 2}, g);
      flips += x[0] == 2;
    }
    CHECK(flips > 430);
    CHECK(flips < 570);
  }
  SUBCASE("RandomCrop with padding: a shifted window, zero outside, every shift seen") {
    const std::vector<float> img{1, 2, 3, 4, 5, 6, 7, 8, 9,  // (2, 3, 3)
                                 11, 12, 13, 14, 15, 16, 17, 18, 19};
    std::set<std::pair<int, int>> shifts;
    for (uint64_t s = 0; s < 200; ++s) {
      std::vector<float> x = img;
      Generator g(s);
      RandomCrop(1).apply(x.data(), {2, 3, 3}, g);
      bool found = false;
      for (int dy = -1; dy <= 1 && !found; ++dy)
        for (int dx = -1; dx <= 1 && !found; ++dx) {
          std::vector<float> want(18);
          for (int c = 0; c < 2; ++c)
            for (int y = 0; y < 3; ++y)
              for (int xx = 0; xx < 3; ++xx) {
                const int sy = y + dy, sx = xx + dx;
                want[(c * 3 + y) * 3 + xx] = sy < 0 || sy > 2 || sx < 0 || sx > 2 ? 0.0f : img[(c * 3 + sy) * 3 + sx];
              }
          if (want == x) {
            found = true;
            shifts.insert({dy, dx});
          }
        }
      CHECK_MESSAGE(found, "seed " << s << ": not a shifted window");
    }
    CHECK(shifts.size() == 9);
    std::vector<float> x = img;
    RandomCrop(0).apply(x.data(), {2, 3, 3}, gen);
    CHECK(x == img);
  }
  SUBCASE("the same generator state gives the same result") {
    std::vector<float> a(3 * 8 * 8), b;
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i);
    b = a;
    Generator g1(42), g2(42);
    for (const auto& t : cifar_augmentation()) {
      t->apply(a.data(), {3, 8, 8}, g1);
      t->apply(b.data(), {3, 8, 8}, g2);
    }
    CHECK(a == b);
  }
}

TEST_CASE("DistributedSampler partitions like torch's DistributedSampler") {
  const SafetensorsFile file = testing::load_torch_fixture("data.safetensors", "make_data.py");
  const json cases = json::parse(file.metadata.at("cases"));
  int checked = 0;
  for (const json& c : cases) {
    const int64_t n = c[0], world = c[1];
    const bool drop_last = c[2].get<int>() != 0;
    for (int64_t rank = 0; rank < world; ++rank) {
      const std::string key = "dist.n" + std::to_string(n) + ".w" + std::to_string(world) + ".r" +
                              std::to_string(rank) + ".d" + std::to_string(int(drop_last));
      CAPTURE(key);
      DistributedSampler s(n, world, rank, {.shuffle = false, .seed = 0, .drop_last = drop_last});
      const std::vector<int64_t> got = s.indices(0);
      CHECK(got == file.at(key).to_vector<int64_t>());
      CHECK(static_cast<int64_t>(got.size()) == s.num_samples());
      ++checked;
    }
  }
  CHECK(checked == 35);

  // Shuffled: equal shares that together cover every index, a new order each epoch.
  const int64_t n = 23, world = 4;
  std::vector<std::vector<int64_t>> shares;
  for (int64_t rank = 0; rank < world; ++rank)
    shares.push_back(DistributedSampler(n, world, rank, {.shuffle = true, .seed = 5}).indices(3));
  std::multiset<int64_t> all;
  for (const auto& s : shares) {
    CHECK(s.size() == 6);
    all.insert(s.begin(), s.end());
  }
  for (int64_t i = 0; i < n; ++i) CHECK(all.count(i) >= 1);
  CHECK(all.size() == 24);  // one index repeated as padding
  DistributedSampler s0(n, world, 0, {.shuffle = true, .seed = 5});
  CHECK(s0.indices(3) == shares[0]);
  CHECK(s0.indices(4) != shares[0]);
  CHECK_THROWS_AS(DistributedSampler(10, 2, 2), std::invalid_argument);
}

TEST_CASE("random_permutation: a seeded permutation") {
  const std::vector<int64_t> p = random_permutation(100, 9);
  std::vector<int64_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 100; ++i) CHECK(sorted[i] == i);
  CHECK(random_permutation(100, 9) == p);
  CHECK(random_permutation(100, 10) != p);
  CHECK(random_permutation(0, 1).empty());
}

TEST_CASE("DataLoader: every example once per epoch, seeded order, a new order per epoch") {
  auto dataset = std::make_shared<IndexDataset>(103);
  DataLoader loader(dataset, {.batch_size = 10, .shuffle = true, .seed = 7});
  CHECK(loader.num_batches() == 11);
  const std::vector<Batch> e0 = take_epoch(loader, 0);
  REQUIRE(e0.size() == 11);
  CHECK(e0.back().images.shape() == Shape{3, 1, 2, 2});
  std::vector<int64_t> order;
  for (const Batch& b : e0) {
    const auto idx = batch_indices(b);
    const auto labels = b.labels.to_vector<int64_t>();
    for (size_t j = 0; j < idx.size(); ++j) CHECK(labels[j] == idx[j] % 7);
    order.insert(order.end(), idx.begin(), idx.end());
  }
  std::vector<int64_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 103; ++i) CHECK(sorted[i] == i);
  CHECK(order == random_permutation(103, 7 + 0));

  DataLoader same(dataset, {.batch_size = 10, .shuffle = true, .seed = 7});
  CHECK(same_batches(take_epoch(same, 0), e0));
  CHECK(!same_batches(take_epoch(same, 1), e0));
  CHECK(same_batches(take_epoch(loader, 0), e0));  // an epoch can be replayed
  DataLoader other_seed(dataset, {.batch_size = 10, .shuffle = true, .seed = 8});
  CHECK(!same_batches(take_epoch(other_seed, 0), e0));

  DataLoader sequential(dataset, {.batch_size = 10, .shuffle = false});
  const auto seq = take_epoch(sequential, 5);
  CHECK(batch_indices(seq[0]) == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  CHECK(batch_indices(seq[10]) == std::vector<int64_t>{100, 101, 102});
}

TEST_CASE("DataLoader: drop_last") {
  auto dataset = std::make_shared<IndexDataset>(103);
  DataLoader loader(dataset, {.batch_size = 10, .drop_last = true, .seed = 1});
  CHECK(loader.num_batches() == 10);
  const auto batches = take_epoch(loader, 0);
  CHECK(batches.size() == 10);
  for (const Batch& b : batches) CHECK(b.images.size(0) == 10);
  DataLoader exact(std::make_shared<IndexDataset>(30), {.batch_size = 10, .drop_last = true});
  CHECK(take_epoch(exact, 0).size() == 3);
  DataLoader tiny(std::make_shared<IndexDataset>(5), {.batch_size = 10, .drop_last = true});
  CHECK(take_epoch(tiny, 0).empty());
}

TEST_CASE("DataLoader: prefetching workers give the same batches as loading in next()") {
  SyntheticOptions so;
  so.size = 157;
  so.image_shape = {3, 8, 8};
  so.seed = 3;
  so.distinct = 64;
  auto dataset = std::make_shared<SyntheticDataset>(so);
  DataLoaderOptions base{.batch_size = 16, .shuffle = true, .seed = 11, .transforms = cifar_augmentation()};
  DataLoaderOptions inline_opts = base;
  inline_opts.num_workers = 0;
  DataLoader reference(dataset, inline_opts);
  for (int workers : {1, 2, 4}) {
    for (int prefetch : {1, 3, 8}) {
      CAPTURE(workers);
      CAPTURE(prefetch);
      DataLoaderOptions o = base;
      o.num_workers = workers;
      o.prefetch_batches = prefetch;
      DataLoader loader(dataset, o);
      for (int64_t epoch : {0, 1}) CHECK(same_batches(take_epoch(loader, epoch), take_epoch(reference, epoch)));
    }
  }
  // The augmentation did something: an un-augmented epoch differs.
  DataLoaderOptions plain = inline_opts;
  plain.transforms.clear();
  DataLoader no_aug(dataset, plain);
  CHECK(!same_batches(take_epoch(no_aug, 0), take_epoch(reference, 0)));
}

// A run resumed in the middle of an epoch (apps/checkpointing.h) starts its loader there.
TEST_CASE("DataLoader: an epoch started at batch k gives the uninterrupted epoch's batches from k") {
  SyntheticOptions so;
  so.size = 157;
  so.image_shape = {3, 8, 8};
  so.seed = 5;
  auto dataset = std::make_shared<SyntheticDataset>(so);
  for (int workers : {0, 2}) {
    CAPTURE(workers);
    DataLoader loader(dataset, {.batch_size = 16, .shuffle = true, .seed = 7, .num_workers = workers,
                                .transforms = cifar_augmentation()});
    const std::vector<Batch> whole = take_epoch(loader, 3);
    REQUIRE(whole.size() == 10);
    for (int64_t k : {0, 1, 6, 9, 10}) {
      CAPTURE(k);
      loader.start_epoch(3, k);
      std::vector<Batch> rest;
      for (Batch b; loader.next(b);) rest.push_back(b);
      CHECK(same_batches(rest, std::vector<Batch>(whole.begin() + k, whole.end())));
    }
    CHECK_THROWS_WITH_AS(loader.start_epoch(3, 11), doctest::Contains("cannot start at batch 11: it has 10"),
                         std::invalid_argument);
    CHECK_THROWS_AS(loader.start_epoch(3, -1), std::invalid_argument);
  }
}

TEST_CASE("DataLoader: a worker's exception is rethrown in the caller") {
  auto dataset = std::make_shared<IndexDataset>(50, Shape{1, 2, 2}, /*throw_at=*/27);
  for (int workers : {0, 1, 3}) {
    CAPTURE(workers);
    DataLoader loader(dataset, {.batch_size = 5, .shuffle = false, .num_workers = workers});
    loader.start_epoch(0);
    Batch b;
    for (int k = 0; k < 5; ++k) REQUIRE(loader.next(b));
    check_error([&] { loader.next(b); }, {"IndexDataset: broken example 27"});
    loader.start_epoch(1);  // usable again
    REQUIRE(loader.next(b));
    CHECK(batch_indices(b) == std::vector<int64_t>{0, 1, 2, 3, 4});
  }
}

TEST_CASE("DataLoader: abandoned epochs and destruction shut the workers down") {
  // A slow data set: each example takes 1 ms, so workers are busy when the loader stops.
  class Slow : public IndexDataset {
   public:
    Slow() : IndexDataset(400) {}
    int64_t read(int64_t i, float* dst) const override {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return IndexDataset::read(i, dst);
    }
  };
  auto dataset = std::make_shared<Slow>();
  {
    DataLoader loader(dataset, {.batch_size = 8, .num_workers = 3, .prefetch_batches = 6});
    Batch b;
    loader.start_epoch(0);
    REQUIRE(loader.next(b));
    loader.start_epoch(1);  // abandons epoch 0 while workers are mid-batch
    REQUIRE(loader.next(b));
    CHECK(b.index == 0);
  }  // destroyed with workers running
  DataLoader unstarted(dataset, {});
  Batch b;
  CHECK(!unstarted.next(b));
}

TEST_CASE("DataLoader: a worker loads the next batch while the consumer holds this one") {
  // Counts the examples read. Without workers, next() reads exactly one batch; with one,
  // the next batch gets read while the consumer has not asked for it (the deadline only
  // guards against a hang: no timing decides this test).
  class Counting : public IndexDataset {
   public:
    Counting() : IndexDataset(64) {}
    int64_t read(int64_t i, float* dst) const override {
      {
        std::lock_guard lock(mutex);
        ++reads;
      }
      changed.notify_all();
      return IndexDataset::read(i, dst);
    }
    mutable std::mutex mutex;
    mutable std::condition_variable changed;
    mutable int64_t reads = 0;
  };
  auto count_after_first_batch = [](int workers) {
    auto dataset = std::make_shared<Counting>();
    DataLoader loader(dataset, {.batch_size = 8, .num_workers = workers, .prefetch_batches = 2});
    loader.start_epoch(0);
    Batch b;
    REQUIRE(loader.next(b));
    std::unique_lock lock(dataset->mutex);
    if (workers > 0)
      dataset->changed.wait_for(lock, std::chrono::seconds(60), [&] { return dataset->reads >= 16; });
    return dataset->reads;
  };
  CHECK(count_after_first_batch(0) == 8);
  CHECK(count_after_first_batch(1) >= 16);
}

TEST_CASE("DataLoader with a DistributedSampler visits the rank's share") {
  auto dataset = std::make_shared<IndexDataset>(23);
  auto sampler = std::make_shared<DistributedSampler>(23, 4, 1, DistributedSamplerOptions{.shuffle = false});
  DataLoader loader(dataset, {.batch_size = 4, .sampler = sampler});
  CHECK(loader.epoch_size() == 6);
  std::vector<int64_t> seen;
  for (const Batch& b : loader.epoch(0))
    for (int64_t i : batch_indices(b)) seen.push_back(i);
  CHECK(seen == sampler->indices(0));
}

TEST_CASE("Subset and SyntheticDataset") {
  auto dataset = std::make_shared<IndexDataset>(10);
  auto first = Subset::first(dataset, 4);
  CHECK(first->size() == 4);
  CHECK(first->get(3).image.to_vector<float>()[0] == 3.0f);
  CHECK(Subset::first(dataset, 100)->size() == 10);
  CHECK_THROWS_AS(Subset(dataset, {10}), std::invalid_argument);

  SyntheticOptions so;
  so.size = 1000;
  so.image_shape = {2, 5, 7};
  so.num_classes = 3;
  so.seed = 4;
  so.distinct = 10;
  SyntheticDataset a(so), b(so);
  CHECK(a.image_shape() == Shape{2, 5, 7});
  CHECK(a.get(13).image.to_vector<float>() == b.get(13).image.to_vector<float>());
  CHECK(a.get(13).image.to_vector<float>() == a.get(3).image.to_vector<float>());
  CHECK(a.get(13).image.to_vector<float>() != a.get(4).image.to_vector<float>());
  for (int64_t i = 0; i < 10; ++i) CHECK((a.get(i).label >= 0 && a.get(i).label < 3));
  so.seed = 5;
  CHECK(SyntheticDataset(so).get(0).image.to_vector<float>() != a.get(0).image.to_vector<float>());
}

TEST_CASE("BatchToDevice: the batch itself on the cpu; on cuda, the same values") {
  data::Batch b{from_vector({1, 2, 3, 4, 5, 6}, {1, 1, 2, 3}, DType::f32),
                from_vector({7}, {1}, DType::i64), 3};
  data::BatchToDevice cpu(Device::cpu());
  const data::Batch same = cpu(b);
  CHECK(same.images.kernel_view().data == b.images.kernel_view().data);
  CHECK(same.index == 3);
  if (!ringflow::testing::require_cuda()) return;
  data::BatchToDevice gpu(Device::cuda());
  for (int i = 0; i < 3; ++i) {  // both staging buffers, then the first again
    const data::Batch d = gpu(b);
    CHECK(d.images.device() == Device::cuda());
    CHECK(d.images.to_vector<float>() == b.images.to_vector<float>());
    CHECK(d.labels.to_vector<int64_t>() == std::vector<int64_t>{7});
  }
}

TEST_CASE("dirichlet partition: every example to one user, the same for a seed, skewed by alpha") {
  // 600 examples, 6 classes of 100 (labels i % 6).
  std::vector<uint8_t> labels(600), pixels(600);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<uint8_t>(i % 6);
  const ByteImageDataset d(pixels, labels, {1, 1, 1}, 6);
  for (double alpha : {0.1, 1.0, 100.0}) {
    CAPTURE(alpha);
    const auto shares = dirichlet_partition(d, 4, alpha, 7);
    REQUIRE(shares.size() == 4);
    std::vector<int> seen(600, 0);
    for (const auto& s : shares)
      for (int64_t i : s) ++seen[static_cast<size_t>(i)];
    CHECK(std::all_of(seen.begin(), seen.end(), [](int k) { return k == 1; }));
    CHECK(dirichlet_partition(d, 4, alpha, 7) == shares);
    CHECK(dirichlet_partition(d, 4, alpha, 8) != shares);
    // How unevenly users hold each class: the largest share of a class, averaged over classes.
    double top = 0;
    for (int64_t c = 0; c < 6; ++c) {
      int64_t most = 0;
      for (const auto& s : shares)
        most = std::max<int64_t>(most, std::count_if(s.begin(), s.end(), [&](int64_t i) { return i % 6 == c; }));
      top += static_cast<double>(most) / 100 / 6;
    }
    if (alpha == 0.1) CHECK(top > 0.6);   // mostly one user per class
    if (alpha == 100.0) CHECK(top < 0.4); // near the even 0.25
  }
  CHECK(partition_from_name("iid").iid());
  CHECK(partition_from_name("dirichlet:0.5").dirichlet_alpha == 0.5);
  for (const char* bad : {"dirichlet:0", "dirichlet:-1", "dirichlet:", "dirichlet:x", "noniid"}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(partition_from_name(bad), doctest::Contains("dirichlet:ALPHA"),
                         std::invalid_argument);
  }
  const ShardSampler s({5, 9, 11, 2}, 3);
  std::vector<int64_t> e0 = s.indices(0), e1 = s.indices(1);
  CHECK(e0 != e1);
  std::sort(e0.begin(), e0.end());
  CHECK(e0 == std::vector<int64_t>{2, 5, 9, 11});
}
