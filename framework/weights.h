// Weights files: a model's state_dict alone (parameters and buffers under PyTorch's names,
// `layer1.0.conv1.weight`, `bn1.running_mean`, ...) as safetensors, what PyTorch loads with
// `model.load_state_dict(safetensors.torch.load_file(path))` (torchvision's models too, for
// the models named after theirs) and what `train --weights` / `--export-weights` read and
// write. Checkpoints (checkpoint.h) hold the optimizer and the position besides.
#pragma once

#include <map>
#include <string>

#include "ringflow/framework/nn/module.h"

namespace ringflow {

// Every parameter and buffer of model, on the cpu, in the dtype the model holds (f32 master
// weights under mixed precision), with metadata {"format": "pt"} (what Hugging Face's
// loaders look for) and `metadata`. Written atomically (serialize.h).
void save_weights(const std::string& path, const nn::Module& model,
                  const std::map<std::string, std::string>& metadata = {});

// Loads path into model strictly: throws std::runtime_error "<path>: ..." listing
// every tensor missing from it, every one the model lacks, and every shape that differs
// (with both shapes), before anything is copied; and whatever load_safetensors refuses.
// Values are converted to the model's dtype and device. A ringflow checkpoint (every tensor
// model.* or optimizer.*, some optimizer.*) gives its model.* tensors.
void load_weights(const std::string& path, nn::Module& model);

}  // namespace ringflow
