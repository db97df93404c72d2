#include "ringflow/apps/device_choice.h"

#include <stdexcept>

#include <fmt/core.h>

#include "ringflow/kernels/cuda_devices.h"

namespace ringflow::apps {

namespace {

std::string plural(int n, const char* what) {
  return fmt::format("{} {}{}", n, what, n == 1 ? "" : "s");
}

}  // namespace

DeviceRequest check_device(const std::string& flag) {
  DeviceRequest r;
  r.flag = flag;
  if (flag == "cpu") return r;
  if (flag != "auto" && flag != "cuda") {
    Device d;  // the CPU unless the flag is cuda:N
    try {
      d = Device::parse(flag);
    } catch (const std::exception&) {
    }
    if (!d.is_cuda())
      throw std::invalid_argument(fmt::format("--device {}: expected cpu, cuda, cuda:N or auto", flag));
    r.index = d.index;
  }
  r.count = cuda_device_count(&r.why);
  if (r.count == 0 && flag != "auto")
    throw std::invalid_argument(fmt::format("--device {}: no usable CUDA device ({})", flag, r.why));
  if (r.index >= r.count)
    throw std::invalid_argument(fmt::format("--device {}: this machine has {} (0 to {})", flag,
                                            plural(r.count, "CUDA device"), r.count - 1));
  return r;
}

DeviceChoice choose_device(const DeviceRequest& r, int local_rank) {
  if (r.flag == "cpu") return {Device::cpu(), "cpu"};
  if (!r.gpu()) return {Device::cpu(), fmt::format("cpu (auto: no usable GPU: {})", r.why)};
  if (r.index >= 0) return {Device::cuda(r.index), Device::cuda(r.index).str()};
  const Device d = Device::cuda(local_rank % r.count);
  return {d, fmt::format("{} ({}local rank {} of a machine with {})", d.str(),
                         r.flag == "auto" ? "auto: " : "", local_rank, plural(r.count, "GPU"))};
}

std::string choose_backend(const std::string& flag, const DeviceRequest& device,
                           const std::string& algo, int local_ranks) {
  const bool own_gpus = device.gpu() && (device.index < 0 ? local_ranks <= device.count : local_ranks == 1);
  const bool ours = algo != "auto" && algo != "native";  // one of our algorithms: MPI's group runs it
  const std::string backend = flag == "auto" ? (own_gpus && !ours ? "nccl" : "mpi") : flag;
  if (backend != "mpi" && backend != "nccl")
    throw std::invalid_argument(fmt::format("--backend {}: expected auto, mpi or nccl", flag));
  if (backend == "nccl" && !device.gpu())
    throw std::invalid_argument(fmt::format(
        "--backend nccl: NCCL reduces GPU tensors, but this rank trains on cpu ({}); use {}",
        device.flag == "cpu" ? "--device cpu" : "--device " + device.flag + ": no usable GPU: " + device.why,
        device.flag == "cpu" ? "--device cuda or --backend mpi" : "--backend mpi"));
  if (backend == "nccl" && ours)
    throw std::invalid_argument(fmt::format(
        "--backend nccl runs NCCL's own allreduce, not --algo {} (that one runs over --backend mpi)", algo));
  return backend;
}

}  // namespace ringflow::apps
