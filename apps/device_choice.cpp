#include "apps/device_choice.h"

#include <cstdlib>
#include <stdexcept>

#include <fmt/core.h>

#include "kernels/cuda_devices.h"

namespace ringflow::apps {

int local_rank_from_env() {
  for (const char* var : {"MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK"})
    if (const char* v = std::getenv(var)) return std::max(0, std::atoi(v));
  return 0;
}

DeviceChoice choose_device(const std::string& flag, int local_rank) {
  if (flag == "cpu") return {Device::cpu(), "cpu"};
  if (flag != "auto" && flag != "cuda" && flag.rfind("cuda:", 0) != 0)
    throw std::invalid_argument(fmt::format("--device {}: expected cpu, cuda, cuda:N or auto", flag));
  std::string why;
  const int count = cuda_device_count(&why);
  if (flag == "auto" && count == 0) return {Device::cpu(), fmt::format("cpu (auto: no usable GPU: {})", why)};
  if (count == 0) throw std::invalid_argument(fmt::format("--device {}: no usable CUDA device ({})", flag, why));
  if (flag == "auto" || flag == "cuda") {
    const Device d = Device::cuda(local_rank % count);
    return {d, fmt::format("{} ({}local rank {} of a machine with {} GPU{})", d.str(),
                           flag == "auto" ? "auto: " : "", local_rank, count, count == 1 ? "" : "s")};
  }
  Device d;
  try {
    d = Device::parse(flag);
  } catch (const std::exception&) {
    throw std::invalid_argument(fmt::format("--device {}: expected cpu, cuda, cuda:N or auto", flag));
  }
  if (d.index >= count)
    throw std::invalid_argument(fmt::format("--device {}: this machine has {} CUDA device{} (0 to {})",
                                            flag, count, count == 1 ? "" : "s", count - 1));
  return {d, d.str()};
}

std::string choose_backend(const std::string& flag, Device device, const std::string& algo) {
  const std::string backend = flag == "auto" ? (device.is_cuda() ? "nccl" : "mpi") : flag;
  if (backend != "mpi" && backend != "nccl")
    throw std::invalid_argument(fmt::format("--backend {}: expected auto, mpi or nccl", flag));
  if (backend == "nccl" && !device.is_cuda())
    throw std::invalid_argument(fmt::format(
        "--backend nccl: NCCL reduces GPU tensors, but this rank trains on {} (pick --device cuda, "
        "or --backend mpi)", device.str()));
  if (backend == "nccl" && algo != "auto" && algo != "native")
    throw std::invalid_argument(fmt::format(
        "--backend nccl runs NCCL's own allreduce, not --algo {} (that one runs over --backend mpi)", algo));
  return backend;
}

}  // namespace ringflow::apps
