// train's flags: what they hold and how CLI11 reads them (`train --help` lists them).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include "ringflow/apps/non_finite.h"

namespace ringflow::apps {

// --optimizer: torch.optim's SGD, Adam, AdamW (framework/optim/).
enum class OptimizerKind { sgd, adam, adamw };
const char* optimizer_name(OptimizerKind kind);  // "sgd", "adam", "adamw"

struct Flags {
  std::string model = "small_cnn";
  std::string dataset = "fashion-mnist";
  std::string data_dir;  // default: the data set's usual place
  int epochs = 2;
  int64_t batch_size = 32;
  double lr = 0.02, momentum = 0.9, weight_decay = 0.0;
  std::string schedule = "cosine";
  int warmup_epochs = 0;
  int threads = 0;
  std::string conv_algo = "auto";
  std::string memory_format = "auto";  // framework/memory_format.h
  bool cuda_graphs = false;            // forward and backward replayed from a CUDA graph
  std::string precision = "fp32";
  std::string device = "auto", backend = "auto";
  uint64_t seed = 0;
  int log_every = 20;
  int64_t max_iters = 0;
  int eval_every = 1;
  int workers = 1;
  int prefetch_factor = 2;  // batches built ahead per worker
  bool no_memory_check = false;  // train even where the step's memory estimate exceeds the host's
  std::string metrics, trace;
  // Checkpoints (apps/checkpointing.h).
  std::string checkpoint, checkpoint_dir, resume;
  int64_t checkpoint_every = 0;  // iterations; 0: at the epochs' ends only
  int checkpoint_keep = 3;
  bool resume_model_only = false;
  // Data parallelism.
  std::string sync = "none";
  std::string algo = "auto";
  std::string launcher = "auto";
  std::string transport = "auto", socket_interface;
  double bucket_cap_mb = 25;
  bool tune_buckets = false;  // --bucket-cap-mb auto
  std::string comm_hook = "allreduce";
  bool find_unused = false;
  int64_t global_batch = 0;  // 0: --batch-size per rank
  int grad_accum = 1;
  double comm_timeout_s = 300;
  std::string comm_thread_cpu = "none";  // auto, none or a CPU number
  // Federated averaging (--sync fedavg) and how the data is split among the ranks.
  int64_t local_steps = 0;  // 0: rounds by --local-epochs
  int local_epochs = 0;     // 0: 1 when --local-steps is 0 too
  std::string fed_topology = "cloud";
  std::string comm_precision = "fp32";
  std::string partition = "iid";
  // As PyTorch's ImageNet example and torchvision's reference scripts name them.
  OptimizerKind optimizer = OptimizerKind::sgd;
  OnNonFinite on_nonfinite = OnNonFinite::stop;  // a loss or gradients holding inf or NaN
  int64_t nonfinite_check_every = 10;            // optimizer steps between looks at the gradients
  double clip_grad_norm = 0;   // 0: no clipping
  double label_smoothing = 0;  // torch.nn.CrossEntropyLoss's
  std::string weights;         // a plain state_dict to start from (framework/weights.h)
  std::string export_weights;  // the trained model's state_dict, written at the end
  bool evaluate = false;       // the test set alone, then exit
  bool quiet = false;          // results and errors only
  // Own images (apps/data_choice.h): --dataset imagefolder or shards.
  std::string train_transform = "imagenet", val_transform;  // val: train's when empty
  int image_size = 0;  // 0: the model's input size
  bool skip_bad_images = false;
  int64_t max_image_pixels = 89478485;  // PIL's MAX_IMAGE_PIXELS (data::kDefaultMaxImagePixels)
};

// Adds every flag of train to app, bound to f, with --config FILE (CLI11's TOML or INI:
// `batch-size = 64`, the command line overriding the file) and --version.
void add_flags(CLI::App& app, Flags& f);

// What one flag alone cannot tell: flags that apply to another --sync, or exclude each
// other. Throws std::invalid_argument naming them.
void check_flag_combinations(const Flags& f);

}  // namespace ringflow::apps
