#include "ringflow/apps/device_choice.h"

#include <stdexcept>

#include <fmt/core.h>

#include "ringflow/apps/train_flags.h"
#include "ringflow/kernels/cuda_devices.h"

namespace ringflow::apps {

namespace {

std::string plural(int n, const char* what) {
  return fmt::format("{} {}{}", n, what, n == 1 ? "" : "s");
}

}  // namespace

DeviceRequest check_device(const DeviceFlag& flag) {
  DeviceRequest r;
  r.flag = flag;
  if (flag.kind == DeviceFlag::Kind::cpu) return r;
  r.count = cuda_device_count(&r.why);
  if (r.count == 0 && flag.kind != DeviceFlag::Kind::automatic)
    throw std::invalid_argument(fmt::format("--device {}: no usable CUDA device ({})", flag_name(flag), r.why));
  if (flag.index >= r.count)
    throw std::invalid_argument(fmt::format("--device {}: this machine has {} (0 to {})", flag_name(flag),
                                            plural(r.count, "CUDA device"), r.count - 1));
  return r;
}

DeviceChoice choose_device(const DeviceRequest& r, int local_rank) {
  if (r.flag.kind == DeviceFlag::Kind::cpu) return {Device::cpu(), "cpu"};
  if (!r.gpu()) return {Device::cpu(), fmt::format("cpu (auto: no usable GPU: {})", r.why)};
  if (r.flag.index >= 0) return {Device::cuda(r.flag.index), Device::cuda(r.flag.index).str()};
  const Device d = Device::cuda(local_rank % r.count);
  return {d, fmt::format("{} ({}local rank {} of a machine with {})", d.str(),
                         r.flag.kind == DeviceFlag::Kind::automatic ? "auto: " : "", local_rank,
                         plural(r.count, "GPU"))};
}

BackendKind choose_backend(BackendKind flag, const DeviceRequest& device, comm::Algorithm algo,
                           int local_ranks) {
  const bool own_gpus = device.gpu() && (device.flag.index < 0 ? local_ranks <= device.count
                                                               : local_ranks == 1);
  // One of our algorithms: MPI's group runs it.
  const bool ours = algo != comm::Algorithm::automatic && algo != comm::Algorithm::native;
  const BackendKind backend = flag == BackendKind::automatic
                                  ? (own_gpus && !ours ? BackendKind::nccl : BackendKind::mpi)
                                  : flag;
  const bool cpu = device.flag.kind == DeviceFlag::Kind::cpu;
  if (backend == BackendKind::nccl && !device.gpu())
    throw std::invalid_argument(fmt::format(
        "--backend nccl: NCCL reduces GPU tensors, but this rank trains on cpu ({}); use {}",
        cpu ? "--device cpu" : "--device " + flag_name(device.flag) + ": no usable GPU: " + device.why,
        cpu ? "--device cuda or --backend mpi" : "--backend mpi"));
  if (backend == BackendKind::nccl && ours)
    throw std::invalid_argument(fmt::format(
        "--backend nccl runs NCCL's own allreduce, not --algo {} (that one runs over --backend mpi)",
        flag_name(algo)));
  return backend;
}

}  // namespace ringflow::apps
