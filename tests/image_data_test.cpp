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
  return std::make_shared<ImageTransform>(ImageTransform::preset("imagenet", train, size));
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
  ImageTransformOptions o = ImageTransform::preset("imagenet", false, 8).options();
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
  CHECK(mean < 4.0);
}
