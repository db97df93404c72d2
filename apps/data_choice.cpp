#include "ringflow/apps/data_choice.h"

#include <fmt/core.h>

#include <stdexcept>

namespace ringflow::apps {

static_assert(Flags{}.max_image_pixels == data::kDefaultMaxImagePixels);

bool is_image_dataset(DatasetKind dataset) {
  return dataset == DatasetKind::imagefolder || dataset == DatasetKind::shards;
}

void add_image_data_flags(CLI::App& app, Flags& f) {
  add_choice(app, "--train-transform", f.train_transform, transform_choices(), "imagefolder/shards: "
             "torchvision's training recipe: imagenet (RandomResizedCrop, RandomHorizontalFlip, "
             "Normalize) or cifar (Resize, RandomCrop(padding=4), RandomHorizontalFlip, Normalize)");
  app.add_option_function<data::TransformPreset>(
         "--val-transform", [&f](const data::TransformPreset& t) { f.val_transform = t; },
         "imagefolder/shards: the validation recipe: imagenet (Resize(size * 256/224), "
         "CenterCrop) or cifar (Resize); default: --train-transform's")
      ->transform(choice_of(transform_choices()));
  app.add_option("--image-size", f.image_size, "imagefolder/shards: the side of the square images the "
                 "transforms make (0: the model's input size)")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_flag("--skip-bad-images", f.skip_bad_images, "imagefolder/shards: skip an image that cannot be "
               "read or decoded (each named on stderr, counted per epoch) instead of stopping");
  app.add_option("--max-image-pixels", f.max_image_pixels, "imagefolder/shards: refuse an image of more "
                 "pixels, from its header (decompression bombs; PIL's MAX_IMAGE_PIXELS); 0: no limit")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
}

namespace {

// The class names shared by the training and validation sets, or an error naming both.
void check_same_classes(const Flags& f, const std::vector<std::string>& train, const std::vector<std::string>& val) {
  if (val != train)
    throw std::invalid_argument(fmt::format("{}/val has the classes [{}], {}/train [{}]: they must be the same",
                                            f.data_dir, data::class_list(val), f.data_dir, data::class_list(train)));
}

}  // namespace

Data open_image_data(const Flags& f, const Shape& model_input, int rank, int world) {
  if (model_input.size() != 3 || model_input[0] != 3)
    throw std::invalid_argument(fmt::format("--model {} takes images of shape {}; --dataset {} gives RGB "
                                            "images: pick a model of 3-channel inputs", f.model,
                                            shape_str(model_input), flag_name(f.dataset)));
  if (f.data_dir.empty())
    throw std::invalid_argument(fmt::format("--dataset {} needs --data-dir DIR ({})", flag_name(f.dataset),
                                            f.dataset == DatasetKind::shards ? "DIR/train/*.tar and DIR/val/*.tar, as "
                                            "ringflow-pack writes them" : "DIR/train/<class>/<images> and "
                                            "DIR/val/<class>/<images>"));
  if (f.dataset == DatasetKind::shards && !f.partition.iid())
    throw std::invalid_argument(fmt::format("--partition {} splits a data set by label, which a stream of "
                                            "shards cannot; use --dataset imagefolder", flag_name(f.partition)));
  const int size = f.image_size > 0 ? f.image_size : static_cast<int>(model_input[1]);
  const data::TransformPreset val = f.val_transform.value_or(f.train_transform);
  auto train_t = std::make_shared<data::ImageTransform>(data::ImageTransform::preset(f.train_transform, true, size));
  auto val_t = std::make_shared<data::ImageTransform>(data::ImageTransform::preset(val, false, size));
  const data::ImageReadOptions read{.max_image_pixels = f.max_image_pixels};
  Data d;
  d.note = fmt::format("{} x {} images, transforms {} (train) and {} (val)", size, size,
                       flag_name(f.train_transform), flag_name(val));
  if (f.dataset == DatasetKind::shards) {
    std::shared_ptr<data::ImageShards> train;
    try {
      train = data::ImageShards::open(f.data_dir, /*train=*/true, train_t,
                                      {.rank = rank, .world = world, .seed = f.seed, .read = read});
    } catch (const data::TooFewShards& e) {
      throw std::invalid_argument(e.with_option("--max-count of ringflow-pack"));
    }
    // Evaluation runs on rank 0 alone, over every shard in order.
    auto val = data::ImageShards::open(f.data_dir, /*train=*/false, val_t, {.shuffle = false, .read = read});
    check_same_classes(f, train->shards().classes, val->shards().classes);
    d.train = train;
    d.test = val;
    d.classes = train->shards().classes;
    d.split_by_rank = true;
    d.note += fmt::format("; {} training shards ({} images, {} per rank and epoch)", train->shards().files.size(),
                          train->shards().total(), train->size());
  } else {
    auto train = data::ImageFolder::open(f.data_dir, /*train=*/true, train_t, read);
    auto val = data::ImageFolder::open(f.data_dir, /*train=*/false, val_t, read);
    check_same_classes(f, train->classes(), val->classes());
    d.train = train;
    d.test = val;
    d.classes = train->classes();
    for (const auto& set : {train, val}) {
      const data::ImageFolderScan& s = set->scan();
      if (s.ignored > 0)
        d.note += fmt::format("\n{}: {} file(s) ignored (not .jpg, .jpeg or .png), e.g. {}", set->root(),
                              s.ignored, s.ignored_examples.front());
    }
  }
  d.note = fmt::format("{} classes ({}); ", d.classes.size(), data::class_list(d.classes)) + d.note;
  return d;
}

std::string describe_data_error(const std::exception& e) {
  if (const auto* big = dynamic_cast<const data::ImageAboveLimit*>(&e)) return big->with_option("--max-image-pixels");
  return e.what();
}

void check_model_takes(nn::Module& model, const Flags& f, const Shape& image, Device device) {
  NoGradGuard no_grad;
  model.eval();
  try {
    Shape batch{1};
    batch.insert(batch.end(), image.begin(), image.end());
    model(zeros(batch, DType::f32, device));
  } catch (const std::exception& e) {
    model.train();
    throw std::invalid_argument(fmt::format("--image-size {}: --model {} does not take {} images ({}); pick "
                                            "another size, or leave --image-size out for the model's own",
                                            f.image_size, f.model, shape_str(image), e.what()));
  }
  model.train();
}

}  // namespace ringflow::apps
