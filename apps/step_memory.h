// Whether a training step fits in the host's memory, decided before training: a probe model
// of the same architecture runs forward and backward at two small batches, and the CPU
// allocator's peak between them gives the bytes per image and the fixed bytes.
#pragma once

#include <cstdint>
#include <string>

#include "ringflow/kernels/dtype.h"

namespace ringflow::apps {

struct StepMemory {
  double fixed_bytes = 0;      // gradients, workspaces, transformed weights: what no image adds
  double per_image_bytes = 0;  // activations kept for backward, the input, their gradients
  double parameter_bytes = 0;  // the model's parameters alone (f32)
  // The host allocator caches freed blocks by exact size (kernels/cpu/allocator.h): at large
  // batches it holds nearly as much again as the activations allocated (docs/failures.md),
  // so they count twice.
  double activations(int64_t batch) const { return 2 * per_image_bytes * static_cast<double>(batch); }
  double at(int64_t batch) const { return fixed_bytes + activations(batch); }
};

// The peak of host memory that a forward and backward of `model` takes, fitted from batches
// 2 and 4 (under autocast to `precision` unless f32), on a fresh model that leaves the random
// streams alone.
StepMemory measure_step_memory(const std::string& model, DType precision);

// The host's memory that a process may still take: the smaller of /proc/meminfo's
// MemAvailable and what the cgroup's memory.max leaves; 0 when neither can be read.
double available_host_memory();

// Throws std::invalid_argument naming `flag` (e.g. "--batch-size 10000") with the figures
// when `ranks_here` ranks of `need` bytes each (m.at(batch) and what the caller adds)
// exceed `available` bytes.
void check_step_memory(double need, const StepMemory& m, int64_t batch, int ranks_here,
                       double available, const std::string& model, const std::string& flag);

}  // namespace ringflow::apps
