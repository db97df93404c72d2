// Image data sets (framework/data/image_*): against what PIL and torchvision make of the same
// files (tests/fixtures/images.safetensors, written by tests/fixtures/make_images.py from the
// images beside it): ImageFolder's classes, labels and order; decoded pixels equal to PIL's;
// Resize + CenterCrop and a resized crop within 1 grey level of torchvision's PIL path, and
// Normalize as it computes it; loader batches the same whatever the number of workers; every
// kind of bad input named in one message.
#include <doctest/doctest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "ringflow/framework/ringflow.h"
#include "safetensors_reader.h"

using namespace ringflow;
using namespace ringflow::data;
namespace fs = std::filesystem;

namespace {

const std::string kImages = std::string(RINGFLOW_SOURCE_DIR) + "/tests/fixtures/images";

const testing::SafetensorsFile& fixture() {
  static const testing::SafetensorsFile f(std::string(RINGFLOW_SOURCE_DIR) + "/tests/fixtures/images.safetensors");
  return f;
}

nlohmann::json meta(const std::string& key) { return nlohmann::json::parse(fixture().metadata().at(key)); }

// A fresh folder for one test, removed afterwards.
struct Scratch {
  fs::path path;
  explicit Scratch(const std::string& name) {
    path = fs::temp_directory_path() / ("ringflow_image_test_" + std::to_string(::getpid()) + "_" + name);
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~Scratch() {
    std::error_code ec;
    fs::permissions(path, fs::perms::all, ec);
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& rel) const { return (path / rel).string(); }
};

// The fixture's data set copied to a scratch folder, to be broken in one place.
void copy_images(const Scratch& s) { fs::copy(kImages, s.path, fs::copy_options::recursive); }

std::vector<uint8_t> bytes_of(const std::string& path) { return read_file_bytes(path); }

// The middle of a JPEG's first scan: past the segments before it, by their lengths.
size_t middle_of_scan(const std::vector<uint8_t>& jpeg) {
  size_t at = 2;
  bool scan = false;
  while (!scan) {
    REQUIRE(at + 4 <= jpeg.size());
    scan = jpeg[at + 1] == 0xDA;
    at += 2 + (size_t{jpeg[at + 2]} << 8 | jpeg[at + 3]);
  }
  return at + (jpeg.size() - 2 - at) / 2;
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                              static_cast<std::streamsize>(bytes.size()));
}

// The largest |ours * 255 - theirs| over an (S, S, 3) fixture, ours (3, S, S) in [0, 1].
double max_level_difference(const std::vector<float>& ours, const testing::StoredTensor& theirs) {
  const int64_t h = theirs.shape[0], w = theirs.shape[1];
  double worst = 0;
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      for (int64_t c = 0; c < 3; ++c)
        worst = std::max(worst, std::abs(ours[(c * h + y) * w + x] * 255.0 - theirs.f64((y * w + x) * 3 + c)));
  return worst;
}

// Mean 0, std 1: the output is ToTensor's, v / 255.
ImageTransformOptions unnormalized(ImageTransformOptions o) {
  o.mean = {0, 0, 0};
  o.std = {1, 1, 1};
  return o;
}

std::shared_ptr<const ImageTransform> imagenet(bool train, int size) {
  return std::make_shared<ImageTransform>(ImageTransform::preset(TransformPreset::imagenet, train, size));
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("ImageFolder: classes, labels and order as torchvision's ImageFolder; other files ignored and counted") {
  const ImageFolder folder(kImages + "/train", imagenet(false, 8));
  CHECK(folder.classes() == meta("classes").get<std::vector<std::string>>());
  const nlohmann::json samples = meta("samples");
  REQUIRE(folder.size() == static_cast<int64_t>(samples.size()));
  for (int64_t i = 0; i < folder.size(); ++i) {
    CHECK(folder.file(i) == kImages + "/train/" + samples[i][0].get<std::string>());
    CHECK(folder.label(i) == samples[i][1].get<int64_t>());
  }
  CHECK(folder.scan().ignored == 2);  // notes.txt, readme.md
  CHECK(folder.image_shape() == Shape{3, 8, 8});
  CHECK(folder.num_classes() == 4);
}

TEST_CASE("decoders: every JPEG and PNG mode gives PIL's convert('RGB') pixels exactly") {
  const ImageFolder folder(kImages + "/train", imagenet(false, 8));
  int compared = 0;
  for (int64_t i = 0; i < folder.size(); ++i) {
    const std::string key = "pixels." + std::to_string(i);
    if (!fixture().contains(key)) continue;
    const testing::StoredTensor& want = fixture().at(key);
    const std::vector<uint8_t> file = bytes_of(folder.file(i));
    const ImageHeader header = read_image_header(file, folder.file(i));
    DecodedImage image;
    decode_image(file, header, folder.file(i), image);
    INFO(folder.file(i));
    REQUIRE(image.height == want.shape[0]);
    REQUIRE(image.width == want.shape[1]);
    int64_t differ = 0;
    for (int64_t k = 0; k < want.numel(); ++k) differ += image.rgb[k] != want.f64(k);
    CHECK(differ == 0);
    ++compared;
  }
  CHECK(compared == 12);
}

TEST_CASE("Resize + CenterCrop and a resized crop: within 1 grey level of torchvision's PIL path") {
  const ImageFolder folder(kImages + "/train", imagenet(false, 8));
  const nlohmann::json cases = meta("resize_cases"), boxes = meta("resized_crop_boxes");
  const ImageReadOptions exact{.reduce_on_decode = false};
  for (int64_t i = 0; i < folder.size(); ++i) {
    INFO(folder.file(i));
    const std::vector<uint8_t> file = bytes_of(folder.file(i));
    for (size_t c = 0; c < cases.size(); ++c) {
      const int resize = cases[c][0], crop = cases[c][1];
      const ImageTransform t(unnormalized({.resize = ResizeOptions{.size = resize}, .center_crop = crop}));
      std::vector<float> out(3 * crop * crop);
      Generator gen(0);
      read_image_example(file, folder.file(i), t, exact, gen, out.data());
      INFO("Resize(", resize, ") CenterCrop(", crop, ")");
      CHECK(max_level_difference(out, fixture().at(cat("resize.", i, ".", c))) <= 1.0);
    }
    // RandomResizedCrop's resampling: torchvision's resized_crop of a given box.
    const auto box = boxes[i].get<std::vector<int>>();  // top, left, height, width, size
    const ImageTransform t(unnormalized({.random_resized_crop = RandomResizedCropOptions{.size = box[4]}}));
    CropPlan plan{.x0 = double(box[1]), .y0 = double(box[0]), .x1 = double(box[1] + box[3]),
                  .y1 = double(box[0] + box[2]), .clip_x0 = box[1], .clip_y0 = box[0],
                  .clip_x1 = box[1] + box[3], .clip_y1 = box[0] + box[2], .resized_width = box[4],
                  .resized_height = box[4], .width = box[4], .height = box[4]};
    DecodedImage image;
    decode_image(file, read_image_header(file, folder.file(i)), folder.file(i), image);
    std::vector<float> out(3 * box[4] * box[4]);
    t.apply(image, plan, out.data());
    CHECK(max_level_difference(out, fixture().at(cat("resized_crop.", i))) <= 1.0);
  }
}

TEST_CASE("imagenet val preset: Normalize(ToTensor(...)) as torchvision computes it") {
  const ImageFolder folder(kImages + "/train", imagenet(false, 8));
  const int resize = meta("resize_cases")[0][0], crop = meta("resize_cases")[0][1];
  ImageTransformOptions o = ImageTransform::preset(TransformPreset::imagenet, false, 8).options();
  o.resize->size = resize;
  o.center_crop = crop;
  const ImageTransform t(o);
  for (int64_t i = 0; i < folder.size(); ++i) {
    INFO(folder.file(i));
    std::vector<float> out(3 * crop * crop);
    Generator gen(0);
    read_image_example(bytes_of(folder.file(i)), folder.file(i), t, {.reduce_on_decode = false}, gen, out.data());
    const testing::StoredTensor& want = fixture().at(cat("normalized.", i));
    double worst = 0;
    for (int64_t k = 0; k < want.numel(); ++k) worst = std::max(worst, std::abs(out[k] - want.f64(k)));
    CHECK(worst <= 1e-6);
  }
}

TEST_CASE("decode-time reduction: a JPEG read at 1/4 of its size stays close to the full-size path") {
  const ImageFolder folder(kImages + "/train", imagenet(false, 8));
  const int64_t large = std::stoll(fixture().metadata().at("large"));
  const std::vector<uint8_t> file = bytes_of(folder.file(large));
  const auto c = meta("resize_cases")[2];  // Resize(30) CenterCrop(24) of 160x120: 1/4 is 40x30
  const int resize = c[0], crop = c[1];
  const ImageTransform t(unnormalized({.resize = ResizeOptions{.size = resize}, .center_crop = crop}));
  Generator gen(0);
  const CropPlan plan = t.plan(160, 120, gen);
  CHECK(ImageTransform::reduction(plan) == 4);
  std::vector<float> out(3 * crop * crop);
  read_image_example(file, "large", t, {.reduce_on_decode = true}, gen, out.data());
  const testing::StoredTensor& want = fixture().at(cat("resize.", large, ".2"));
  double sum = 0;
  for (int64_t y = 0; y < crop; ++y)
    for (int64_t x = 0; x < crop; ++x)
      for (int64_t ch = 0; ch < 3; ++ch)
        sum += std::abs(out[(ch * crop + y) * crop + x] * 255.0 - want.f64((y * crop + x) * 3 + ch));
  const double mean = sum / (3 * crop * crop);
  MESSAGE("mean |reduced - PIL| = ", mean, " grey levels");
  CHECK(mean < 2.0);  // PIL's own draft mode (the same reduction) gives 1.04 here
}

TEST_CASE("bad input: each case stops with one message naming the file or folder") {
  Scratch s("bad");
  copy_images(s);
  const std::string jpg = s / "train/Zebra/z1.jpg", png = s / "train/cat_1/i.png";
  const auto transform = imagenet(false, 8);
  // Reads one file as an example of the data set, as the loader's workers do.
  const auto read_one = [&](const std::string& path, ImageReadOptions options = {}) {
    std::vector<float> out(3 * 8 * 8);
    Generator gen(0);
    read_image_example(read_file_bytes(path), path, *transform, options, gen, out.data());
  };
  const auto expect_bad = [&](const std::string& path, const std::string& what, ImageReadOptions options = {}) {
    std::string message = "no error";
    try {
      read_one(path, options);
    } catch (const BadExample& e) {
      message = e.what();
    }
    INFO(message);
    CHECK(message.rfind(path + ": ", 0) == 0);
    CHECK(message.find(what) != std::string::npos);
    CHECK(message.find('\n') == std::string::npos);
  };
  const std::vector<uint8_t> jpeg_bytes = bytes_of(jpg), png_bytes = bytes_of(png);

  SUBCASE("a truncated JPEG") {
    write_bytes(jpg, {jpeg_bytes.begin(), jpeg_bytes.begin() + static_cast<long>(jpeg_bytes.size() * 2 / 3)});
    expect_bad(jpg, "truncated JPEG: the file ends before its end-of-image marker (libjpeg-turbo: Premature end of "
                    "JPEG file)");
  }
  SUBCASE("a truncated JPEG whose Exif thumbnail has an end-of-image marker of its own") {
    const std::vector<uint8_t> thumbnail = bytes_of(s / "train/Zebra/z2.JPEG");
    const size_t length = 2 + 6 + thumbnail.size();  // APP1's length field, "Exif\0\0", the JPEG
    std::vector<uint8_t> b = {0xFF, 0xD8, 0xFF, 0xE1, uint8_t(length >> 8), uint8_t(length & 0xFF), 'E', 'x', 'i',
                              'f', 0, 0};
    b.insert(b.end(), thumbnail.begin(), thumbnail.end());
    b.insert(b.end(), jpeg_bytes.begin() + 2, jpeg_bytes.end());
    write_bytes(jpg, b);
    CHECK_NOTHROW(read_one(jpg));
    b.resize(b.size() - jpeg_bytes.size() / 3);
    write_bytes(jpg, b);
    expect_bad(jpg, "truncated JPEG: the file ends before its end-of-image marker");
  }
  SUBCASE("a whole JPEG whose scan is damaged so that libjpeg-turbo reads past its end: corrupt, not truncated") {
    std::vector<uint8_t> b = jpeg_bytes;
    const size_t at = middle_of_scan(b);
    b[at] = 0xFF, b[at + 1] = 0xE1, b[at + 2] = 0xFF, b[at + 3] = 0xFF;  // an APP1 segment of 64 KiB
    write_bytes(jpg, b);
    expect_bad(jpg, "corrupt JPEG: damaged data made libjpeg-turbo read past the end-of-image marker (libjpeg-turbo: "
                    "Corrupt JPEG data: premature end of data segment)");
  }
  SUBCASE("a JPEG with a second start-of-image marker in its scan: libjpeg-turbo's error") {
    std::vector<uint8_t> b = jpeg_bytes;
    const size_t at = middle_of_scan(b);
    b[at] = 0xFF, b[at + 1] = 0xD8;
    write_bytes(jpg, b);
    expect_bad(jpg, "corrupt JPEG (libjpeg-turbo: Invalid JPEG file structure: two SOI markers)");
    DecodedImage whole;  // TurboJPEG's path (read_one's transform decodes a region)
    CHECK(error_of([&] { decode_image(b, read_image_header(b, "f.jpg"), "f.jpg", whole); }) ==
          "f.jpg: corrupt JPEG (libjpeg-turbo: Invalid JPEG file structure: two SOI markers)");
  }
  SUBCASE("a corrupt JPEG: its frame header overwritten") {
    std::vector<uint8_t> b = jpeg_bytes;
    for (size_t i = 0; i + 1 < b.size(); ++i)
      if (b[i] == 0xFF && b[i + 1] == 0xC0) {  // SOF0: the sample precision becomes 0
        b[i + 4] = 0;
        break;
      }
    write_bytes(jpg, b);
    expect_bad(jpg, "not a readable JPEG (libjpeg-turbo: ");
  }
  SUBCASE("a file named .jpg that is no image") {
    std::ofstream(jpg) << "hello";
    expect_bad(jpg, "neither a JPEG nor a PNG (it starts with bytes 68 65 6c 6c 6f)");
  }
  SUBCASE("an empty image file") {
    std::ofstream(jpg, std::ios::trunc).close();
    expect_bad(jpg, "neither a JPEG nor a PNG (it starts with an empty file)");
  }
  SUBCASE("a truncated PNG") {
    write_bytes(png, {png_bytes.begin(), png_bytes.begin() + static_cast<long>(png_bytes.size() / 2)});
    expect_bad(png, "corrupt PNG (libpng: truncated: the file ends inside a chunk)");
  }
  SUBCASE("a PNG whose image data fails its checksum") {
    std::vector<uint8_t> b = png_bytes;
    b[b.size() - 12 - 6] ^= 0x55;  // inside the last IDAT (IEND is the last 12 bytes)
    write_bytes(png, b);
    expect_bad(png, "corrupt PNG (libpng: ");
  }
  SUBCASE("an image above the pixel limit, refused from its header") {
    const std::string detail = jpg + ": 24x19 = 456 pixels is above the limit of 455 (a decompression bomb?)";
    expect_bad(jpg, detail.substr(jpg.size() + 2) + "; raise max_image_pixels if the image is real",
               {.max_image_pixels = 455});
    CHECK_NOTHROW(read_one(jpg, {.max_image_pixels = 456}));
    bool caught = false;
    try {  // a program names its own flag
      read_one(jpg, {.max_image_pixels = 455});
    } catch (const ImageAboveLimit& e) {
      caught = true;
      CHECK(e.detail == detail);
      CHECK(e.with_option("--max-image-pixels") == detail + "; raise --max-image-pixels if the image is real");
    }
    CHECK(caught);
  }
  SUBCASE("a file that cannot be opened") {
    if (::geteuid() != 0) {
      fs::permissions(jpg, fs::perms::none);
      expect_bad(jpg, "cannot open: Permission denied");
    } else {  // root reads any file: a link to nowhere fails in the same open()
      MESSAGE("running as root: the unreadable file is a dangling link");
      fs::remove(jpg);
      fs::create_symlink(s / "nowhere.jpg", jpg);
      expect_bad(jpg, "cannot open: No such file or directory");
    }
  }
  SUBCASE("an empty class folder") {
    fs::create_directories(s / "train/empty/sub");
    std::ofstream(s / "train/empty/sub/notes.txt") << "x";
    const std::string e = error_of([&] { ImageFolder(s / "train", transform); });
    CHECK(e == s / "train/empty" + ": no .jpg, .jpeg or .png file in this class folder (1 other files)");
  }
  SUBCASE("no class folders, a missing train/ or val/, a missing folder") {
    fs::remove_all(s / "val");
    CHECK(error_of([&] { ImageFolder::open(s.path.string(), false, transform); }).rfind(s / "val" + ": no such folder", 0) == 0);
    fs::remove_all(s / "train");
    CHECK(error_of([&] { ImageFolder::open(s.path.string(), true, transform); }).rfind(s / "train" + ": no such folder", 0) == 0);
    CHECK(error_of([&] { ImageFolder::open(s / "nothing", true, transform); }).rfind(s / "nothing" + ": no such folder", 0) == 0);
    fs::create_directories(s / "train");
    std::ofstream(s / "train/a.jpg") << "x";
    CHECK(error_of([&] { ImageFolder::open(s.path.string(), true, transform); }).rfind(s / "train" + ": no class folders", 0) == 0);
  }
}

TEST_CASE("DataLoader on an image folder: a bad image stops the epoch naming it, or is skipped and counted") {
  Scratch s("skip");
  copy_images(s);
  const std::string bad = s / "train/apple/sub/c.jpg";
  std::ofstream(bad, std::ios::trunc) << "not a jpeg";
  auto folder = std::make_shared<ImageFolder>(s / "train", imagenet(true, 8));
  DataLoaderOptions o{.batch_size = 64, .shuffle = false, .num_workers = 2};
  {
    DataLoader loader(folder, o);
    loader.start_epoch(1);
    Batch b;
    CHECK(error_of([&] { loader.next(b); }) == bad + ": neither a JPEG nor a PNG (it starts with bytes 6e 6f 74 20 61 20 6a 70)");
  }
  o.skip_bad_examples = true;
  DataLoader loader(folder, o);
  loader.start_epoch(1);
  Batch b;
  REQUIRE(loader.next(b));
  CHECK(b.images.shape() == Shape{folder->size() - 1, 3, 8, 8});
  REQUIRE(b.skipped.size() == 1);
  CHECK(b.skipped[0].rfind(bad + ": ", 0) == 0);
  // The labels of the images kept, in order.
  std::vector<int64_t> want;
  for (int64_t i = 0; i < folder->size(); ++i)
    if (folder->file(i) != bad) want.push_back(folder->label(i));
  for (size_t i = 0; i < want.size(); ++i) CHECK(b.labels.data<int64_t>()[i] == want[i]);
}

TEST_CASE("DataLoader on an image folder: the same batches whatever the workers and prefetching; ranks' shares") {
  auto folder = std::make_shared<ImageFolder>(kImages + "/train", imagenet(true, 16));
  const auto epoch = [&](int workers, int prefetch, std::shared_ptr<const Sampler> sampler = nullptr) {
    DataLoader loader(folder, {.batch_size = 4, .seed = 11, .num_workers = workers, .prefetch_batches = prefetch,
                               .sampler = sampler});
    std::vector<float> images;
    std::vector<int64_t> labels;
    for (const Batch& b : loader.epoch(2)) {
      images.insert(images.end(), b.images.data<float>(), b.images.data<float>() + b.images.numel());
      labels.insert(labels.end(), b.labels.data<int64_t>(), b.labels.data<int64_t>() + b.labels.numel());
    }
    return std::pair{images, labels};
  };
  const auto one = epoch(0, 1);
  CHECK(one.first.size() == static_cast<size_t>(folder->size() * 3 * 16 * 16));
  CHECK(epoch(1, 1) == one);
  CHECK(epoch(3, 2) == one);
  CHECK(epoch(4, 8) == one);
  // Random crops and flips differ from one epoch to another and from the val transform's.
  DataLoader loader(folder, {.batch_size = 4, .seed = 11, .num_workers = 2});
  std::vector<float> other;
  for (const Batch& b : loader.epoch(3)) other.insert(other.end(), b.images.data<float>(), b.images.data<float>() + b.images.numel());
  CHECK(other != one.first);
  // Two ranks: their shares are disjoint and cover the set (DistributedSampler's rule).
  std::vector<int64_t> seen;
  for (int rank = 0; rank < 2; ++rank) {
    auto sampler = std::make_shared<DistributedSampler>(folder->size(), 2, rank,
                                                        DistributedSamplerOptions{.seed = 11, .drop_last = true});
    const auto share = sampler->indices(2);
    seen.insert(seen.end(), share.begin(), share.end());
    CHECK(epoch(2, 2, sampler) == epoch(0, 1, sampler));
  }
  std::sort(seen.begin(), seen.end());
  CHECK(std::adjacent_find(seen.begin(), seen.end()) == seen.end());
  CHECK(seen.size() == static_cast<size_t>(folder->size() / 2 * 2));
}

namespace {

// The fixture's training images written as shards of `max_count` into scratch/out.
ShardSet pack_fixture(const Scratch& s, int64_t max_count) {
  return write_image_shards(scan_image_folder(kImages + "/train"), s / "out", {.max_count = max_count}).set;
}

// Every record of one epoch of `shards`, in stream order.
std::vector<Record> all_records(const ImageShards& shards, int64_t epoch) {
  std::vector<Record> out;
  auto stream = shards.open(epoch);
  for (Record r; stream->next(r);) out.push_back(r);
  return out;
}

}  // namespace

TEST_CASE("shards: ringflow-pack's writer and the stream give back every image's file and label once") {
  Scratch s("shards");
  const ImageFolderScan scan = scan_image_folder(kImages + "/train");
  const ShardSet written = pack_fixture(s, 4);
  CHECK(written.files.size() == 4);  // 13 images: 4 + 4 + 4 + 1
  CHECK(written.samples == std::vector<int64_t>{4, 4, 4, 1});
  // The files' bytes and labels, as the scan found them.
  const auto text = [](const std::vector<uint8_t>& b) { return std::string(b.begin(), b.end()); };
  std::multiset<std::pair<std::string, int64_t>> want;
  for (size_t i = 0; i < scan.files.size(); ++i) want.insert({text(bytes_of(scan.files[i])), scan.labels[i]});
  const auto check_all = [&](const ShardSet& set) {
    const ImageShards shards(set, imagenet(false, 8), {.shuffle = false});
    CHECK(shards.size() == 13);
    std::multiset<std::pair<std::string, int64_t>> got;
    for (const Record& r : all_records(shards, 1)) got.insert({text(r.bytes), r.label});
    CHECK(got == want);
  };
  const ShardSet read = read_shard_set(s / "out");
  CHECK(read.classes == scan.classes);
  CHECK(read.files == written.files);
  CHECK(read.samples == written.samples);
  check_all(read);
  SUBCASE("without shards.json: scanned, classes named by number") {
    fs::remove(s / "out/shards.json");
    const ShardSet scanned = read_shard_set(s / "out");
    CHECK(scanned.samples == written.samples);
    CHECK(scanned.classes == std::vector<std::string>{"0", "1", "2", "3"});
    check_all(scanned);
  }
  SUBCASE("shards written by GNU tar (pax headers, long paths) read the same") {
    const fs::path staging = s.path / "staging" / std::string(120, 'd');  // past ustar's 100 bytes
    fs::create_directories(staging);
    for (size_t i = 0; i < scan.files.size(); ++i) {
      fs::copy_file(scan.files[i], staging / (cat("k", i, ".jpg")));
      std::ofstream(staging / cat("k", i, ".cls")) << scan.labels[i] << "\n";
    }
    fs::create_directories(s / "gnu");
    const std::string cmd = "cd '" + (s.path / "staging").string() + "' && tar --format=pax --sort=name -cf '" +
                            s / "gnu/a.tar" + "' " + std::string(120, 'd');
    REQUIRE(std::system(cmd.c_str()) == 0);
    const ShardSet gnu = read_shard_set(s / "gnu");
    CHECK(gnu.total() == 13);
    check_all(gnu);
  }
}

TEST_CASE("shards: ranks read disjoint shards; batches the same whatever the workers") {
  Scratch s("ranks");
  const ShardSet set = pack_fixture(s, 3);  // 5 shards
  REQUIRE(set.files.size() == 5);
  for (int64_t epoch : {1, 2}) {
    std::multiset<std::string> dealt;
    for (int rank = 0; rank < 2; ++rank) {
      const ImageShards shards(set, imagenet(true, 8), {.rank = rank, .world = 2, .seed = 5});
      CHECK(shards.size() == 6);  // 13 / 2
      for (const std::string& f : shards.rank_shards(epoch)) dealt.insert(f);
      CHECK(all_records(shards, epoch).size() == 6);
    }
    CHECK(dealt.size() == 5);
    CHECK(std::set<std::string>(dealt.begin(), dealt.end()).size() == 5);
  }
  auto shards = std::make_shared<ImageShards>(set, imagenet(true, 8),
                                              ImageShardsOptions{.seed = 5, .shuffle_buffer = 4});
  const auto epoch = [&](int workers, int prefetch) {
    DataLoader loader(shards, {.batch_size = 3, .seed = 5, .num_workers = workers, .prefetch_batches = prefetch});
    std::vector<float> images;
    std::vector<int64_t> labels;
    for (const Batch& b : loader.epoch(3)) {
      images.insert(images.end(), b.images.data<float>(), b.images.data<float>() + b.images.numel());
      labels.insert(labels.end(), b.labels.data<int64_t>(), b.labels.data<int64_t>() + b.labels.numel());
    }
    return std::pair{images, labels};
  };
  const auto one = epoch(0, 1);
  CHECK(one.second.size() == 13);
  CHECK(epoch(1, 1) == one);
  CHECK(epoch(3, 2) == one);
  CHECK(epoch(4, 8) == one);
  // Started at batch 2 (a run resumed mid-epoch): the uninterrupted epoch's batches from there.
  for (int workers : {0, 2}) {
    DataLoader loader(shards, {.batch_size = 3, .seed = 5, .num_workers = workers});
    loader.start_epoch(3, /*first_batch=*/2);
    std::vector<int64_t> labels;
    for (Batch b; loader.next(b);) labels.insert(labels.end(), b.labels.data<int64_t>(), b.labels.data<int64_t>() + b.labels.numel());
    CHECK(labels == std::vector<int64_t>(one.second.begin() + 6, one.second.end()));
  }
  CHECK(error_of([&] { DataLoader(shards, {.sampler = std::make_shared<SequentialSampler>(13)}); })
            .find("not by a sampler") != std::string::npos);
}

TEST_CASE("shards: bad input named in one message") {
  Scratch s("bad_shards");
  const ShardSet set = pack_fixture(s, 4);
  const std::string first = s / "out/" + set.files[0];
  const auto read_all = [&] {
    const ImageShards shards(read_shard_set(s / "out"), imagenet(false, 8), {.shuffle = false});
    all_records(shards, 1);
  };
  SUBCASE("a shard cut inside a member") {
    const std::vector<uint8_t> b = bytes_of(first);
    write_bytes(first, {b.begin(), b.begin() + 512 + 100});  // one header and 100 bytes of its image
    const std::string e = error_of(read_all);
    CHECK(e.rfind(first + ": cut inside member '00000000.", 0) == 0);
    CHECK(e.find("the file ends at byte 612") != std::string::npos);
  }
  SUBCASE("a shard cut inside a header") {
    const std::vector<uint8_t> b = bytes_of(first);
    write_bytes(first, {b.begin(), b.begin() + 300});
    CHECK(error_of(read_all) == first + ": cut inside a header at byte 0 (the file ends at byte 300)");
  }
  SUBCASE("not a tar file") {
    std::ofstream(first, std::ios::trunc) << std::string(1024, 'x');
    CHECK(error_of(read_all) == first + ": no tar header at byte 0 (its checksum fails): not a tar file, or a damaged one");
  }
  SUBCASE("a sample without its class, a class that is not a number") {
    TarWriter w(first);
    const std::vector<uint8_t> jpeg = bytes_of(kImages + "/train/Zebra/z1.jpg");
    w.add("a.jpg", jpeg.data(), jpeg.size());
    w.add("b.jpg", jpeg.data(), jpeg.size());
    w.add("b.cls", reinterpret_cast<const uint8_t*>("1"), 1);
    w.finish();
    CHECK(error_of(read_all) == first + ": sample 'a' has no .cls member (its class number) (a WebDataset sample is key.jpg + key.cls)");
    TarWriter w2(first);
    w2.add("c.jpg", jpeg.data(), jpeg.size());
    w2.add("c.cls", reinterpret_cast<const uint8_t*>("cat"), 3);
    w2.finish();
    CHECK(error_of(read_all) == first + ": c.cls: 'cat' is not a class number");
  }
  SUBCASE("fewer shards than ranks, no shards, a missing folder") {
    const std::string detail = s / "out" + ": 4 shards for 5 ranks: each rank reads shards of its own";
    CHECK(error_of([&] { ImageShards(set, imagenet(false, 8), {.rank = 0, .world = 5}); }) ==
          detail + "; write the images into more shards (a smaller ShardWriterOptions::max_count)");
    bool caught = false;
    try {
      ImageShards(set, imagenet(false, 8), {.rank = 0, .world = 5});
    } catch (const TooFewShards& e) {
      caught = true;
      CHECK(e.with_option("--max-count") == detail + "; write the images into more shards (a smaller --max-count)");
    }
    CHECK(caught);
    fs::create_directories(s / "empty");
    CHECK(error_of([&] { read_shard_set(s / "empty"); }) == s / "empty" + ": no .tar shards in it");
    CHECK(error_of([&] { ImageShards::open(s / "none", true, imagenet(false, 8)); }).rfind(s / "none/train: no such folder", 0) == 0);
  }
}

TEST_CASE("JPEG regions: the same pixels as the whole decode; a file cut below the region still refused") {
  const ImageFolder folder(kImages + "/train", imagenet(false, 8));
  Generator gen(17);
  int decoded_in_part = 0;
  for (int64_t i = 0; i < folder.size(); ++i) {
    const std::vector<uint8_t> file = bytes_of(folder.file(i));
    const ImageHeader header = read_image_header(file, folder.file(i));
    if (header.format != ImageFormat::jpeg) continue;
    for (int reduction : {1, 2}) {
      DecodedImage whole, part;
      decode_image(file, header, "whole", whole, reduction);
      for (int trial = 0; trial < 20; ++trial) {
        const int x0 = static_cast<int>(uniform_int(gen, whole.width)), y0 = static_cast<int>(uniform_int(gen, whole.height));
        const PixelRegion r{x0, y0, x0 + 1 + static_cast<int>(uniform_int(gen, whole.width - x0)),
                            y0 + 1 + static_cast<int>(uniform_int(gen, whole.height - y0))};
        decode_image(file, header, "part", part, reduction, &r);
        INFO(folder.file(i), " reduced ", reduction, ": region (", r.x0, ", ", r.y0, ") - (", r.x1, ", ", r.y1, ")");
        REQUIRE(part.x0 <= r.x0);
        REQUIRE(part.y0 <= r.y0);
        REQUIRE(part.x0 + part.width >= r.x1);
        REQUIRE(part.y0 + part.height >= r.y1);
        decoded_in_part += part.width < whole.width || part.height < whole.height;
        int64_t differ = 0;
        for (int y = r.y0; y < r.y1; ++y)
          for (int x = r.x0; x < r.x1; ++x)
            for (int c = 0; c < 3; ++c)
              differ += part.rgb[((y - part.y0) * size_t(part.width) + (x - part.x0)) * 3 + c] !=
                        whole.rgb[(y * size_t(whole.width) + x) * 3 + c];
        CHECK(differ == 0);
      }
    }
  }
  CHECK(decoded_in_part > 20);  // the large image's small regions
  // Cut at half: the region at the top decodes from what is there, yet the file is refused.
  const int64_t large = std::stoll(fixture().metadata().at("large"));
  std::vector<uint8_t> file = bytes_of(folder.file(large));
  file.resize(file.size() / 2);
  const ImageHeader header = read_image_header(file, "cut.jpg");
  DecodedImage part;
  const PixelRegion top{0, 0, 20, 10};
  CHECK(error_of([&] { decode_image(file, header, "cut.jpg", part, 1, &top); }) ==
        "cut.jpg: truncated JPEG: the file ends before its end-of-image marker (libjpeg-turbo: Premature end of JPEG "
        "file)");
  // Damaged below the region, whole to its end: named corrupt, as the whole decode names it.
  file = bytes_of(folder.file(large));
  const size_t at = middle_of_scan(file);
  file[at] = 0xFF, file[at + 1] = 0xE1, file[at + 2] = 0xFF, file[at + 3] = 0xFF;
  const std::string damaged = "damaged.jpg: corrupt JPEG: damaged data made libjpeg-turbo read past the end-of-image "
                              "marker (libjpeg-turbo: Corrupt JPEG data: premature end of data segment)";
  CHECK(error_of([&] { decode_image(file, header, "damaged.jpg", part, 1, &top); }) == damaged);
  CHECK(error_of([&] { decode_image(file, header, "damaged.jpg", part); }) == damaged);
}
