// Training checkpoints: a model's state, its optimizer's state, the position in training
// and the default generator's state in one safetensors file (readable by any safetensors
// tool: "model.<key>" and "optimizer.<key>" tensors, the rest as string metadata).
// Written atomically (temporary file, fsync, rename): a crash mid-write leaves the previous
// checkpoint intact.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "ringflow/framework/nn/module.h"
#include "ringflow/framework/optim/optimizer.h"

namespace ringflow {

struct TrainingPosition {
  int64_t epoch = 0;      // epochs completed
  int64_t iteration = 0;  // optimizer steps taken in all
};

// `info`: free-form strings kept with the checkpoint (model name, data set) so that a resume
// can check it continues the same run.
void save_checkpoint(const std::string& path, const nn::Module& model,
                     const optim::Optimizer& optimizer, const TrainingPosition& position,
                     const std::map<std::string, std::string>& info = {});

struct Checkpoint {
  TrainingPosition position;
  std::map<std::string, std::string> info;
};

struct CheckpointLoadOptions {
  // The model's tensors alone (fine-tuning from weights, a file without optimizer state):
  // the optimizer keeps its own; position and generator restored where the file has them.
  bool model_only = false;
};

// Loads into model and optimizer strictly and restores the default generator. Throws
// std::runtime_error naming the file and the tensor or key on any mismatch: a key missing
// or extra, a shape or dtype other than the model's (no silent conversion), an optimizer
// tensor the writer listed but the file lacks, metadata that is not a whole number; and
// whatever load_safetensors refuses (corrupt data, overlapping ranges, not a regular file).
Checkpoint load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer& optimizer,
                           const CheckpointLoadOptions& options = {});

}  // namespace ringflow
