#include "ringflow/apps/setup.h"

#include <unistd.h>

#include <fmt/core.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <utility>

#include "ringflow/apps/checkpointing.h"
#include "ringflow/apps/data_choice.h"
#include "ringflow/apps/trace.h"
#include "ringflow/comm/bootstrap/launch.h"
#include "ringflow/comm/group/device_choice.h"
#include "ringflow/comm/group/launch_group.h"
#include "ringflow/comm/group/mpi_process_group.h"
#include "ringflow/comm/group/nccl_process_group.h"

namespace ringflow::apps {

comm::Algorithm algorithm_from_flag(const std::string& name) {
  return name == "rd" ? comm::Algorithm::recursive_doubling : comm::algorithm_from_name(name);
}

DType precision_dtype(const std::string& name) {
  if (name == "fp32") return DType::f32;
  if (name == "fp16") return DType::f16;
  if (name == "bf16") return DType::bf16;
  throw std::invalid_argument("unknown precision '" + name + "' (choices: fp32, fp16, bf16)");
}

namespace {

// This process's rank and the number of processes the launcher started, read from its
// environment (an MPI launcher's, see comm::mpi_launch; torchrun's RANK and WORLD_SIZE,
// srun's SLURM_PROCID and SLURM_NTASKS), without initialising MPI: --sync none must not, so
// that a plain single-process run stays one.
struct Place {
  int rank = 0, size = 1;
};

Place launched_place() {
  if (const std::optional<comm::MpiLaunch> mpi = comm::mpi_launch(); mpi && mpi->size > 0) {
    return {mpi->rank, mpi->size};
  }
  const std::optional<comm::EnvLaunch> env = comm::env_launch();
  return env ? Place{env->rank, env->size} : Place{};
}

int launched_ranks() { return launched_place().size; }

}  // namespace

Data open_data(const Flags& f, const Shape& model_input, int rank, int world) {
  if (is_image_dataset(f.dataset)) return open_image_data(f, model_input, rank, world);
  Data d;
  if (f.dataset == "fashion-mnist") {
    const std::string dir = f.data_dir.empty() ? data::kFashionMnistDir : f.data_dir;
    d.train = data::Mnist::open(dir, /*train=*/true);
    d.test = data::Mnist::open(dir, /*train=*/false);
    auto norm = std::make_shared<data::Normalize>(std::vector<float>{0.2860f}, std::vector<float>{0.3530f});
    d.train_transforms = d.test_transforms = {norm};
  } else if (f.dataset == "cifar10") {
    const std::string dir = f.data_dir.empty() ? "data/cifar-10-batches-bin" : f.data_dir;
    d.train = data::Cifar10::open(dir, /*train=*/true);
    d.test = data::Cifar10::open(dir, /*train=*/false);
    auto norm = std::make_shared<data::Normalize>(std::vector<float>{0.4914f, 0.4822f, 0.4465f},
                                                  std::vector<float>{0.2470f, 0.2435f, 0.2616f});
    d.train_transforms = {std::make_shared<data::RandomCrop>(4),
                          std::make_shared<data::RandomHorizontalFlip>(), norm};
    d.test_transforms = {norm};
  } else {  // synthetic: the model's input shape
    d.train = std::make_shared<data::SyntheticDataset>(
        data::SyntheticOptions{.size = 10000, .image_shape = model_input, .seed = f.seed});
    d.test = std::make_shared<data::SyntheticDataset>(
        data::SyntheticOptions{.size = 1000, .image_shape = model_input, .seed = f.seed + 1});
  }
  // Both sets checked now, not when the first epoch's evaluation meets them.
  const std::string where = f.data_dir.empty() ? "" : fmt::format(" (--data-dir {})", f.data_dir);
  for (const auto& [set, name] : {std::pair{d.train, "training"}, std::pair{d.test, "test"}}) {
    if (set->image_shape() != model_input)
      throw std::invalid_argument(fmt::format(
          "--model {} takes images of shape {}, but the {} set of --dataset {}{} has {}", f.model,
          shape_str(model_input), name, f.dataset, where, shape_str(set->image_shape())));
    if (set->size() == 0)
      throw std::invalid_argument(fmt::format("the {} set of --dataset {}{} is empty", name,
                                              f.dataset, where));
  }
  return d;
}

std::string rank_prefix() {
  try {
    const Place p = launched_place();
    return p.size > 1 ? fmt::format("[rank {}] ", p.rank) : "";
  } catch (const std::exception&) {  // a malformed RANK: the error being reported says so
    return "";
  }
}

std::unique_ptr<optim::Optimizer> make_optimizer(const Flags& f, std::vector<Tensor> params) {
  switch (f.optimizer) {
    case OptimizerKind::sgd:
      return std::make_unique<optim::SGD>(std::move(params), optim::SGDOptions{
          .lr = f.lr, .momentum = f.momentum, .weight_decay = f.weight_decay});
    case OptimizerKind::adam:
      return std::make_unique<optim::Adam>(std::move(params), optim::AdamOptions{
          .lr = f.lr, .weight_decay = f.weight_decay});
    case OptimizerKind::adamw:
      return std::make_unique<optim::AdamW>(std::move(params), optim::AdamOptions{
          .lr = f.lr, .weight_decay = f.weight_decay});
  }
  throw std::invalid_argument("--optimizer: no such optimizer");
}

std::shared_ptr<const optim::LRSchedule> make_schedule(const Flags& f) {
  const int64_t main_epochs = std::max(1, f.epochs - f.warmup_epochs);
  std::shared_ptr<const optim::LRSchedule> main;
  if (f.schedule == "none") main = std::make_shared<optim::StepLR>(1, 1.0);
  else if (f.schedule == "step") main = std::make_shared<optim::StepLR>(std::max<int64_t>(1, main_epochs / 3));
  else if (f.schedule == "multistep")
    main = std::make_shared<optim::MultiStepLR>(std::vector<int64_t>{main_epochs / 2, main_epochs * 3 / 4});
  else main = std::make_shared<optim::CosineAnnealingLR>(main_epochs);
  if (f.warmup_epochs == 0) return main;
  auto warmup = std::make_shared<optim::LinearLR>(0.1, 1.0, f.warmup_epochs);
  return std::make_shared<optim::SequentialLR>(
      std::vector<std::shared_ptr<const optim::LRSchedule>>{warmup, main},
      std::vector<int64_t>{f.warmup_epochs});
}

void check_writable(const char* flag, const std::string& path) {
  if (path.empty()) return;
  const std::filesystem::path p(path);
  const std::filesystem::path dir = p.has_parent_path() ? p.parent_path() : ".";
  std::error_code error;
  if (std::filesystem::is_directory(p, error))
    throw std::invalid_argument(fmt::format("{} {}: is a folder; name a file", flag, path));
  if (!std::filesystem::is_directory(dir, error))
    throw std::invalid_argument(fmt::format("{} {}: the folder {} does not exist", flag, path, dir.string()));
  const std::string probe = path + ".tmp";
  std::FILE* file = std::fopen(probe.c_str(), "a");
  if (!file)
    throw std::invalid_argument(fmt::format("{} {}: cannot write in {}: {}", flag, path,
                                            dir.string(), std::strerror(errno)));
  std::fclose(file);
  std::filesystem::remove(probe, error);
}

void check_output_paths(const Flags& f, int rank, int world) {
  if (rank == 0) {  // rank 0 alone writes checkpoints and metrics
    prepare_checkpoint_places(f);
    check_writable("--metrics", f.metrics);
    check_writable("--export-weights", f.export_weights);
  }
  if (!f.trace.empty()) check_writable("--trace", trace_path_for_rank(f.trace, rank, world));
}

Setup set_up(const Flags& f, SyncMode mode, comm::Timeout comm_timeout) {
  // Before anything heavy: a device that cannot be had fails here, naming the flag.
  const DeviceRequest want = check_device(f.device);
  Setup s;
  if (mode == SyncMode::none) {
    if (launched_ranks() > 1)
      throw std::invalid_argument(fmt::format(
          "--sync none trains one process, but the launcher started {}; pick --sync "
          "gather-scatter, allreduce, ddp or fedavg", launched_ranks()));
  } else {
    const comm::LaunchedGroup launched = comm::launch_group(
        {.launcher = comm::launcher_from_name(f.launcher), .transport = f.transport,
         .socket_interface = f.socket_interface, .checking = comm::comm_check_requested_by_env(),
         .timeout = comm_timeout});
    s.pg = launched.group;
    s.transport = launched.transport;
    s.node = launched.node;
    s.how = launched.how;
    s.processes = comm::allgather_strings(
        *s.pg, fmt::format("{}@{}", getpid(), comm::host_name()), comm_timeout);
  }
  s.device = choose_device(want, s.node.local_rank);
  s.backend = choose_backend(f.backend, want, f.algo, s.node.local_size);
  // The training thread's device, before any tensor is made (NCCL's group takes it too).
  if (s.device.device.is_cuda()) set_cuda_device(s.device.device.index);
  s.grad_pg = s.pg;
  if (s.pg && s.backend == "nccl")
    s.grad_pg = std::make_shared<comm::NcclProcessGroup>(
        *s.pg, comm::NcclProcessGroupOptions{.device = s.device.device.index, .timeout = comm_timeout});
  return s;
}

}  // namespace ringflow::apps
