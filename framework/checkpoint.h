// Training checkpoints: a model's state, its optimizer's state, the position in training
// and the default generator's state in one safetensors file (readable by any safetensors
// tool: "model.<key>" and "optimizer.<key>" tensors, the rest as string metadata).
// Written atomically (temporary file, fsync, rename): a crash mid-write leaves the previous
// checkpoint intact.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "ringflow/framework/nn/module.h"
#include "ringflow/framework/optim/optimizer.h"

namespace ringflow {

struct TrainingPosition {
  int64_t epoch = 0;            // epochs completed
  int64_t iteration = 0;        // optimizer steps taken in all
  int64_t epoch_iteration = 0;  // steps taken of epoch `epoch + 1` (0: at an epoch's end)
};

// The largest position a checkpoint may hold: epochs as an int counts them, iterations as
// a double still counts them exactly (the metrics' JSON numbers).
inline constexpr int64_t kMaxCheckpointEpoch = 2147483647;           // 2^31 - 1
inline constexpr int64_t kMaxCheckpointIteration = int64_t{1} << 53;

// `info`: free-form strings kept with the checkpoint (model name, data set) so that a resume
// can check it continues the same run.
void save_checkpoint(const std::string& path, const nn::Module& model,
                     const optim::Optimizer& optimizer, const TrainingPosition& position,
                     const std::map<std::string, std::string>& info = {});

struct Checkpoint {
  TrainingPosition position;
  std::map<std::string, std::string> info;
  // What loaded but deserves a word, e.g. a file without its integrity checksum.
  std::vector<std::string> warnings;
};

// The file lacks optimizer state that this optimizer needs (CheckpointLoadOptions::model_only
// loads the model without it).
class OptimizerStateMissing : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct CheckpointLoadOptions {
  // The model's tensors alone (fine-tuning from weights, a file without optimizer state):
  // the optimizer keeps its own; position and generator restored where the file has them.
  bool model_only = false;
  // Info the checkpoint must hold where it holds the key at all, e.g. {"model", "small_cnn"}:
  // another value is refused first ("the checkpoint is of model 'mlp', not 'small_cnn'"),
  // before any tensor is compared.
  std::map<std::string, std::string> expect_info = {};
};

// Loads into model and optimizer strictly and restores the default generator. Throws
// std::runtime_error naming the file and the tensor or key on any mismatch: info other
// than expected, a key missing or extra, a shape or dtype other than the model's (no silent
// conversion), an optimizer state that does not cover exactly the parameters that had state
// when it was written (a tensor missing, listed or not: OptimizerStateMissing), metadata that is not a whole number
// or lies outside its range (the position's bounds above); and whatever load_safetensors
// refuses (corrupt data, overlapping ranges, not a regular file). What the file holds is
// printed escaped (printable.h). What fails before the model's tensors are copied changes
// nothing; the optimizer's state is checked after them.
Checkpoint load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer& optimizer,
                           const CheckpointLoadOptions& options = {});

}  // namespace ringflow
