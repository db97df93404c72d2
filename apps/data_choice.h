// train's own-image data sets: --dataset imagefolder (DIR/train/<class>/<image>, DIR/val/...,
// torchvision's ImageFolder) and --dataset shards (WebDataset tar shards that ringflow-pack
// writes), with torchvision's transform recipes (--train-transform, --val-transform,
// --image-size), their flags, and the check that the model takes the images' size.
#pragma once

#include <CLI/CLI.hpp>

#include "ringflow/apps/setup.h"
#include "ringflow/apps/train_flags.h"

namespace ringflow::apps {

// Is --dataset one of the image data sets here?
bool is_image_dataset(DatasetKind dataset);

// --train-transform, --val-transform, --image-size, --skip-bad-images, --max-image-pixels.
void add_image_data_flags(CLI::App& app, Flags& f);

// The training and validation sets of --dataset imagefolder or shards, of RGB images at
// --image-size (default: model_input's), with their class names and a line for the log.
// Throws std::invalid_argument naming the folder or flag: a model that does not take RGB
// images, a validation set whose classes differ from training's, the folders' own errors.
// Shards: rank `rank` of `world` streams its own shards of the training set.
Data open_image_data(const Flags& f, const Shape& model_input, int rank, int world);

// The message of an error from training, in train's terms where it came from the image data
// sets: an image above the pixel limit names --max-image-pixels; others are e.what().
std::string describe_data_error(const std::exception& e);

// --image-size other than the model's own: one forward pass of a black image (evaluation
// mode, no gradients) tells whether the model takes it; throws naming the flag if not.
void check_model_takes(nn::Module& model, const Flags& f, const Shape& image, Device device);

}  // namespace ringflow::apps
