// --device and --backend of apps/train: which device a rank trains on, and which process
// group carries its gradients. Decided before any data is loaded, so that a bad choice
// fails at once with one line naming the flag.
#pragma once

#include <string>

#include "kernels/device.h"

namespace ringflow::apps {

struct DeviceChoice {
  Device device;
  std::string note;  // for the log: what was chosen and why
};

// flag: cpu, cuda, cuda:N or auto. auto and cuda take the GPU numbered by the launcher's
// local rank (local_rank_from_env) modulo the machine's device count; auto falls back to
// the CPU when no GPU is usable. Throws std::invalid_argument naming --device when the
// request cannot be met (no GPU, N past the count, a malformed name).
DeviceChoice choose_device(const std::string& flag, int local_rank);

// This process's position among the job's processes on its machine, from the launcher's
// environment (MPICH's MPI_LOCALRANKID, Open MPI's OMPI_COMM_WORLD_LOCAL_RANK, Slurm's
// SLURM_LOCALID, torchrun's LOCAL_RANK); 0 when none is set.
int local_rank_from_env();

// flag: auto, mpi or nccl; auto is nccl for a CUDA device, mpi otherwise. Throws
// std::invalid_argument naming --backend for nccl on the CPU, or nccl with one of our own
// allreduce algorithms (--algo other than auto or native).
std::string choose_backend(const std::string& flag, Device device, const std::string& algo);

}  // namespace ringflow::apps
