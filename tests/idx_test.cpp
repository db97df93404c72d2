// The IDX reader on the real Fashion-MNIST files (shapes, the documented per-class counts
// and pixel mean) and on every kind of broken file, each written by the test into a temp
// dir both gzip-compressed and plain: the error must name the file and the problem.
#include <doctest/doctest.h>

#include <unistd.h>
#include <zlib.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "ringflow/framework/data/idx.h"

namespace fs = std::filesystem;
using ringflow::data::IdxArray;
using ringflow::data::read_idx;
using ringflow::data::read_idx_pair;

namespace {

const std::string kFashion = "/usr/share/datasets/fashion-mnist";
using Bytes = std::vector<uint8_t>;

// A fresh directory for this process's files, removed at exit.
struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("ringflow_idx_test_" + std::to_string(::getpid()));
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

// Writes bytes to <tmp>/<name>(.gz), gzip-compressed or plain; returns the path.
std::string write_file(const std::string& name, const Bytes& bytes, bool gzip) {
  const std::string path = (temp_dir().path / (name + (gzip ? ".gz" : ""))).string();
  if (gzip) {
    gzFile f = gzopen(path.c_str(), "wb");
    REQUIRE(f != nullptr);
    if (!bytes.empty())
      REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) ==
              static_cast<int>(bytes.size()));
    REQUIRE(gzclose(f) == Z_OK);
  } else {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    REQUIRE(out.good());
  }
  return path;
}

// An IDX header: magic 00 00 <type> <ndims>, then each dim as big-endian u32.
Bytes header(const std::vector<uint32_t>& dims, uint8_t type = 0x08) {
  Bytes b = {0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims)
    for (int shift = 24; shift >= 0; shift -= 8) b.push_back(static_cast<uint8_t>(d >> shift));
  return b;
}

Bytes operator+(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

Bytes iota_bytes(size_t n, uint8_t start = 0) {
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(start + i);
  return b;
}

// The message of the runtime_error that fn throws ("" and a failed check if none).
template <class Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  FAIL_CHECK("no std::runtime_error thrown");
  return "";
}

void check_error(const std::string& path, const std::string& problem) {
  const std::string msg = error_of([&] { read_idx(path); });
  INFO("message: " << msg);
  CHECK(msg.find(path) != std::string::npos);
  CHECK(msg.find(problem) != std::string::npos);
}

}  // namespace

TEST_CASE("Fashion-MNIST from dataset-fashion-mnist: shapes, 6000/1000 per class, pixel mean") {
  const std::string train_images = kFashion + "/train-images-idx3-ubyte.gz";
  REQUIRE_MESSAGE(fs::exists(train_images),
                  "missing " << train_images << ": install the Debian package dataset-fashion-mnist");
  struct Split {
    const char* name;
    int64_t count;
  };
  for (Split split : {Split{"train", 60000}, Split{"t10k", 10000}}) {
    CAPTURE(split.name);
    const auto set = read_idx_pair(kFashion + "/" + split.name + "-images-idx3-ubyte.gz",
                                   kFashion + "/" + split.name + "-labels-idx1-ubyte.gz");
    CHECK(set.images.shape == std::vector<int64_t>{split.count, 28, 28});
    CHECK(set.labels.shape == std::vector<int64_t>{split.count});
    REQUIRE(set.images.data.size() == static_cast<size_t>(split.count * 28 * 28));
    REQUIRE(set.labels.data.size() == static_cast<size_t>(split.count));

    // The dataset is balanced: 6000 training and 1000 test images per class
    // (github.com/zalandoresearch/fashion-mnist, README).
    std::array<int64_t, 10> histogram{};
    for (uint8_t label : set.labels.data) ++histogram.at(label);
    for (int c = 0; c < 10; ++c) {
      CAPTURE(c);
      CHECK(histogram[c] == split.count / 10);
    }
    // The training set's mean pixel is 0.2860 of 255 (the normalisation constant used
    // with Fashion-MNIST everywhere, e.g. torchvision examples).
    if (split.count == 60000) {
      double sum = 0;
      for (uint8_t p : set.images.data) sum += p;
      CHECK(sum / set.images.data.size() / 255.0 == doctest::Approx(0.2860).epsilon(0.002));
    }
  }
}

TEST_CASE("a valid file reads back the same, gzip or plain; a 0-sized dim is empty") {
  for (bool gzip : {true, false}) {
    CAPTURE(gzip);
    const Bytes data = iota_bytes(2 * 3 * 4, 7);
    const IdxArray a = read_idx(write_file("valid", header({2, 3, 4}) + data, gzip));
    CHECK(a.shape == std::vector<int64_t>{2, 3, 4});
    CHECK(a.data == data);
    const IdxArray empty = read_idx(write_file("empty", header({0, 28}), gzip));
    CHECK(empty.shape == std::vector<int64_t>{0, 28});
    CHECK(empty.data.empty());
  }
}

TEST_CASE("every broken file is rejected with its name and the problem, gzip or plain") {
  const std::string missing = (temp_dir().path / "no-such-file.gz").string();
  check_error(missing, "cannot open: No such file or directory");

  for (bool gzip : {true, false}) {
    CAPTURE(gzip);
    SUBCASE("empty file") { check_error(write_file("empty_file", {}, gzip), "truncated header"); }
    SUBCASE("header cut inside the magic") {
      check_error(write_file("cut_magic", {0, 0, 8}, gzip), "truncated header: 3 of 4 magic bytes");
    }
    SUBCASE("header cut inside the dimension sizes") {
      check_error(write_file("cut_dims", Bytes{0, 0, 8, 3, 0, 0, 0, 2, 0}, gzip),
                  "truncated header: 3 dimension sizes need 12 bytes, the file has 5");
    }
    SUBCASE("wrong magic") {
      check_error(write_file("magic", Bytes{0x12, 0x34, 8, 1, 0, 0, 0, 1, 5}, gzip),
                  "wrong magic 0x12340801");
    }
    SUBCASE("unsupported type byte (0x0D: float)") {
      check_error(write_file("float", header({2}, 0x0D) + Bytes(8), gzip),
                  "unsupported data type byte 0x0d");
    }
    SUBCASE("zero dimensions") {
      check_error(write_file("ndims0", Bytes{0, 0, 8, 0, 1}, gzip),
                  "unsupported number of dimensions 0");
    }
    SUBCASE("data shorter than the header says") {
      check_error(write_file("short", header({2, 3}) + iota_bytes(4), gzip),
                  "truncated data: the header announces shape (2, 3) (6 bytes), the file holds 4");
    }
    SUBCASE("trailing garbage after the data") {
      check_error(write_file("long", header({2, 3}) + iota_bytes(9), gzip),
                  "trailing garbage: 3 bytes after the 6 data bytes");
    }
    SUBCASE("a header announcing more than 4 GiB is refused before reading") {
      check_error(write_file("huge", header({65536, 65536, 2}) + iota_bytes(16), gzip),
                  "header announces shape (65536, 65536, 2), more than the 4 GiB limit");
    }
    SUBCASE("a header announcing 1 GB over 16 bytes of data fails as truncated") {
      check_error(write_file("lying", header({1000, 1000, 1000}) + iota_bytes(16), gzip),
                  "truncated data: the header announces shape (1000, 1000, 1000) "
                  "(1000000000 bytes), the file holds 16");
    }
  }
}

TEST_CASE("a gzip stream cut short reports truncated data and zlib's reason") {
  const std::string full = write_file("cut_stream", header({64, 64}) + iota_bytes(4096), true);
  std::ifstream in(full, std::ios::binary);
  Bytes gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(gz.size() > 40);
  gz.resize(gz.size() / 2);
  const std::string cut = write_file("cut_stream_half.gz", gz, false);
  check_error(cut, "truncated data");
  check_error(cut, "unexpected end of file");
}

TEST_CASE("a gzip file without its trailer, or with bytes after it, is refused; concatenated members read") {
  const Bytes data = header({8, 8}) + iota_bytes(64);
  const std::string full = write_file("trailer", data, true);
  std::ifstream in(full, std::ios::binary);
  const Bytes gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(gz.size() > 8);
  // All the data, but not the 8-byte trailer (CRC-32 and length).
  check_error(write_file("no_trailer.gz", Bytes(gz.begin(), gz.end() - 8), false),
              "ends without its trailer");
  check_error(write_file("garbage_after.gz", gz + Bytes{'j', 'u', 'n', 'k'}, false),
              "trailing garbage: 4 bytes after the gzip stream");
  // Two members (what `cat a.gz b.gz` makes) are one valid stream.
  const std::string first = write_file("member1", Bytes(data.begin(), data.begin() + 20), true);
  const std::string second = write_file("member2", Bytes(data.begin() + 20, data.end()), true);
  std::ifstream a(first, std::ios::binary), b(second, std::ios::binary);
  Bytes both((std::istreambuf_iterator<char>(a)), std::istreambuf_iterator<char>());
  both = both + Bytes((std::istreambuf_iterator<char>(b)), std::istreambuf_iterator<char>());
  CHECK(read_idx(write_file("two_members.gz", both, false)).data == iota_bytes(64));
}

TEST_CASE("read_idx_pair: count mismatch, label out of range, labels not 1-D") {
  for (bool gzip : {true, false}) {
    CAPTURE(gzip);
    const std::string images = write_file("pair_images", header({3, 2, 2}) + iota_bytes(12), gzip);
    const std::string labels_ok = write_file("pair_labels_ok", header({3}) + Bytes{0, 9, 4}, gzip);
    const auto set = read_idx_pair(images, labels_ok);
    CHECK(set.labels.data == Bytes{0, 9, 4});
    CHECK(set.images.shape == std::vector<int64_t>{3, 2, 2});

    const std::string labels_4 = write_file("pair_labels_4", header({4}) + Bytes{0, 1, 2, 3}, gzip);
    std::string msg = error_of([&] { read_idx_pair(images, labels_4); });
    INFO("message: " << msg);
    CHECK(msg.find(labels_4) != std::string::npos);
    CHECK(msg.find(images) != std::string::npos);
    CHECK(msg.find("image/label count mismatch: 4 labels for 3 images") != std::string::npos);

    const std::string labels_10 = write_file("pair_labels_10", header({3}) + Bytes{1, 2, 10}, gzip);
    msg = error_of([&] { read_idx_pair(images, labels_10); });
    INFO("message: " << msg);
    CHECK(msg.find(labels_10) != std::string::npos);
    CHECK(msg.find("label out of range: label 10 at index 2 is not below 10 classes") !=
          std::string::npos);
    CHECK_NOTHROW(read_idx_pair(images, labels_10, /*num_classes=*/11));

    const std::string labels_2d = write_file("pair_labels_2d", header({3, 1}) + Bytes{1, 2, 3}, gzip);
    msg = error_of([&] { read_idx_pair(images, labels_2d); });
    INFO("message: " << msg);
    CHECK(msg.find(labels_2d) != std::string::npos);
    CHECK(msg.find("labels must be 1-D, got shape (3, 1)") != std::string::npos);
  }
}
