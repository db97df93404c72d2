// train's flags: what they hold and how CLI11 reads them (`train --help` lists them). Each
// option of a fixed set of names is parsed here, once, into the enum it stands for.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>

#include "ringflow/apps/choices.h"
#include "ringflow/apps/device_choice.h"
#include "ringflow/apps/gradient_sync.h"
#include "ringflow/apps/non_finite.h"
#include "ringflow/comm/bootstrap/launch.h"
#include "ringflow/comm/ddp/comm_hooks.h"
#include "ringflow/comm/ddp/model_average.h"
#include "ringflow/comm/group/launch_group.h"
#include "ringflow/framework/data/image_transform.h"
#include "ringflow/framework/data/partition.h"
#include "ringflow/framework/memory_format.h"
#include "ringflow/kernels/backend.h"

namespace ringflow::apps {

// The options of a fixed set of names, parsed once by add_flags (apps/choices.h); their
// names for messages and records: flag_name(value).
enum class OptimizerKind { sgd, adam, adamw };  // torch.optim's SGD, Adam, AdamW
enum class DatasetKind { fashion_mnist, cifar10, synthetic, imagefolder, shards };
enum class ScheduleKind { none, step, multistep, cosine };  // of the learning rate, per epoch
// --comm-thread-cpu: where the communication thread runs.
struct CommThreadCpu {
  enum class Kind { none, automatic, cpu } kind = Kind::none;
  int cpu = -1;  // Kind::cpu: its number
};

const Choices<OptimizerKind>& optimizer_choices();
const Choices<OnNonFinite>& on_nonfinite_choices();
const Choices<DatasetKind>& dataset_choices();
const Choices<ScheduleKind>& schedule_choices();
const Choices<BackendKind>& backend_choices();
const Choices<SyncMode>& sync_choices();
const Choices<comm::Algorithm>& algorithm_choices();  // "rd": recursive doubling
const Choices<comm::Launcher>& launcher_choices();
const Choices<comm::GroupTransport>& transport_choices();
const Choices<comm::CommHookKind>& comm_hook_choices();
const Choices<comm::AverageTopology>& fed_topology_choices();
const Choices<DType>& precision_choices();  // fp32, bf16, fp16 (--precision, --comm-precision)
const Choices<ConvAlgorithm>& conv_algorithm_choices();
const Choices<MemoryFormat>& memory_format_choices();
const Choices<data::TransformPreset>& transform_choices();

const std::string& flag_name(OptimizerKind v);
const std::string& flag_name(OnNonFinite v);
const std::string& flag_name(DatasetKind v);
const std::string& flag_name(ScheduleKind v);
const std::string& flag_name(BackendKind v);
const std::string& flag_name(SyncMode v);
const std::string& flag_name(comm::Algorithm v);
const std::string& flag_name(comm::Launcher v);
const std::string& flag_name(comm::GroupTransport v);
const std::string& flag_name(comm::CommHookKind v);
const std::string& flag_name(comm::AverageTopology v);
const std::string& flag_name(DType precision);
const std::string& flag_name(ConvAlgorithm v);
const std::string& flag_name(data::TransformPreset v);
std::string flag_name(const DeviceFlag& d);         // "auto", "cpu", "cuda", "cuda:1"
std::string flag_name(const data::Partition& p);    // "iid", "dirichlet:0.5"
std::string flag_name(const CommThreadCpu& c);      // "none", "auto", "3"

struct Flags {
  std::string model = "small_cnn";
  DatasetKind dataset = DatasetKind::fashion_mnist;
  std::string data_dir;  // default: the data set's usual place
  int epochs = 2;
  int64_t batch_size = 32;
  double lr = 0.02, momentum = 0.9, weight_decay = 0.0;
  ScheduleKind schedule = ScheduleKind::cosine;
  int warmup_epochs = 0;
  int threads = 0;
  ConvAlgorithm conv_algo = ConvAlgorithm::automatic;
  DType precision = DType::f32;
  DeviceFlag device;
  BackendKind backend = BackendKind::automatic;
  MemoryFormat memory_format = MemoryFormat::automatic;  // framework/memory_format.h
  bool cuda_graphs = false;  // forward and backward replayed from a CUDA graph
  uint64_t seed = 0;
  int log_every = 20;
  int64_t max_iters = 0;
  int eval_every = 1;
  int workers = 1;
  int prefetch_factor = 2;  // batches built ahead per worker
  bool no_memory_check = false;  // train even where the step's memory estimate exceeds the host's
  std::string metrics, trace;
  // Checkpoints (apps/checkpointing.h).
  std::string checkpoint, checkpoint_dir;
  std::string resume;        // a checkpoint file (--resume FILE)
  bool resume_auto = false;  // --resume auto
  int64_t checkpoint_every = 0;  // iterations; 0: at the epochs' ends only
  int checkpoint_keep = 3;
  bool resume_model_only = false;
  // Data parallelism.
  SyncMode sync = SyncMode::none;
  comm::Algorithm algo = comm::Algorithm::automatic;
  comm::Launcher launcher = comm::Launcher::automatic;
  comm::GroupTransport transport = comm::GroupTransport::automatic;
  std::string socket_interface;
  double bucket_cap_mb = 25;
  bool tune_buckets = false;  // --bucket-cap-mb auto
  comm::CommHookKind comm_hook = comm::CommHookKind::allreduce;
  bool find_unused = false;
  int64_t global_batch = 0;  // 0: --batch-size per rank
  int grad_accum = 1;
  double comm_timeout_s = 300;
  CommThreadCpu comm_thread_cpu;
  // Federated averaging (--sync fedavg) and how the data is split among the ranks.
  int64_t local_steps = 0;  // 0: rounds by --local-epochs
  int local_epochs = 0;     // 0: 1 when --local-steps is 0 too
  comm::AverageTopology fed_topology = comm::AverageTopology::cloud;
  DType comm_precision = DType::f32;
  data::Partition partition;  // iid
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
  data::TransformPreset train_transform = data::TransformPreset::imagenet;
  std::optional<data::TransformPreset> val_transform;  // train's where not given
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
