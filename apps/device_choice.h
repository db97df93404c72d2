// --device and --backend of apps/train: which device a rank trains on, and which process
// group carries its gradients. The flags are checked against the machine before any data is
// loaded (check_device), so that a bad choice fails at once with one line naming the flag;
// the GPU itself is picked once the rank knows its place on its machine (choose_device).
#pragma once

#include <stdexcept>
#include <string>

#include "ringflow/comm/base/types.h"
#include "ringflow/kernels/device.h"

namespace ringflow::apps {

// --device: cpu, cuda (each rank its node-local GPU), cuda:N, or auto.
struct DeviceFlag {
  enum class Kind { automatic, cpu, cuda } kind = Kind::automatic;
  int index = -1;  // cuda:N: N, taken literally; -1: the rank's node-local GPU
};

// --backend: the process group of the gradients.
enum class BackendKind { automatic, mpi, nccl };

// What --device asked for, checked against this machine.
struct DeviceRequest {
  DeviceFlag flag;
  int count = 0;      // usable CUDA devices of this machine
  std::string why;    // count == 0: CUDA's reason (no driver, no device, built without CUDA)
  bool gpu() const { return flag.kind != DeviceFlag::Kind::cpu && count > 0; }  // whether the rank trains on one
};

struct DeviceChoice {
  Device device;
  std::string note;  // for the log: what was chosen and why
};

// Throws std::invalid_argument naming --device when the request cannot be met: cuda or
// cuda:N without a usable GPU (with `why`), N past the device count.
DeviceRequest check_device(const DeviceFlag& flag);

// The device of the rank at `local_rank` among the job's ranks on its machine (0 for one
// process): cuda and auto take GPU local_rank % count, cuda:N takes N, auto without a GPU
// the CPU (the note says why).
DeviceChoice choose_device(const DeviceRequest& request, int local_rank);

// Resolves auto to nccl when each of the machine's `local_ranks` ranks has a GPU of its own
// (NCCL refuses two ranks on one GPU) and `algo` is automatic or native, mpi otherwise.
// Throws std::invalid_argument naming --backend for nccl on the CPU, or nccl with one of our
// own allreduce algorithms.
BackendKind choose_backend(BackendKind flag, const DeviceRequest& device, comm::Algorithm algo,
                           int local_ranks);

}  // namespace ringflow::apps
