// ringflow-pack: an image folder (DIR/train/<class>/<image>, DIR/val/<class>/<image>, as
// train --dataset imagefolder reads) written as WebDataset tar shards (OUT/train/*.tar,
// OUT/val/*.tar, each with shards.json) for train --dataset shards: a few large files that
// ranks stream instead of millions of small ones (framework/data/shard_writer.h).
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include "ringflow/framework/data/shard_writer.h"

int main(int argc, char** argv) {
  CLI::App app{"Write an image folder (DIR/train, DIR/val) as WebDataset tar shards for train --dataset shards"};
  std::string data_dir, out;
  ringflow::data::ShardWriterOptions options;
  app.add_option("--data-dir", data_dir, "the image folder: DIR/train/<class>/<image>, DIR/val/<class>/<image>")
      ->required();
  app.add_option("--out", out, "where the shards go: OUT/train/shard-000000.tar, ..., OUT/val/...")->required();
  app.add_option("--max-count", options.max_count, "samples per shard")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--seed", options.seed, "seed of the shuffle that mixes the classes in each shard")
      ->capture_default_str();
  app.add_flag("--skip-bad-images", options.skip_bad_images, "leave out a file that is not a readable JPEG or "
               "PNG (each named) instead of stopping");
  app.add_option("--max-image-pixels", options.max_image_pixels, "refuse an image of more pixels (0: no limit)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    for (const char* split : {"train", "val"}) {
      const std::string from = data_dir + "/" + split, to = out + "/" + split;
      const ringflow::data::ImageFolderScan scan = ringflow::data::scan_image_folder(from);
      const ringflow::data::ShardWriteResult r = ringflow::data::write_image_shards(scan, to, options);
      for (const std::string& why : r.skipped) fmt::print(stderr, "ringflow-pack: skipped a bad image: {}\n", why);
      fmt::print("{}: {} images of {} classes in {} shards{}{}\n", to, r.set.total(), r.set.classes.size(),
                 r.set.files.size(), r.skipped.empty() ? "" : fmt::format("; {} bad images skipped", r.skipped.size()),
                 scan.ignored ? fmt::format("; {} other files ignored", scan.ignored) : "");
    }
  } catch (const ringflow::data::ImageAboveLimit& e) {
    fmt::print(stderr, "ringflow-pack: {}\n", e.with_option("--max-image-pixels"));
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "ringflow-pack: {}\n", e.what());
    return 1;
  }
  return 0;
}
