// Time per kernel-table op, to find where a step's time goes (bench/train_step --profile-ops).
// While enabled, every kernel call through dispatch.h waits for its device before and after,
// so each op's figure is its own run time; that serializes the device, so a profiled step is
// slower than a measured one and is never timed as one.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "ringflow/kernels/device.h"

namespace ringflow {

struct OpTime {
  std::string op;
  int64_t calls = 0;
  double total_ms = 0;
};

// by_shape: each op's calls grouped by their tensor operands' dtypes, shapes and layouts too,
// "conv2d_forward bf16 (256, 64, 32, 32)nhwc (256, 64, 32, 32)nhwc (64, 64, 3, 3)": which
// layer it is (the names: dispatch.h).
void set_op_profiling(bool on, bool by_shape = false);
bool op_profiling();
bool op_profiling_by_shape();
// The ops timed since the last reset, the most expensive first.
std::vector<OpTime> op_times();
void reset_op_times();

// Times one kernel call: waits for `device` now and again when it goes out of scope.
class OpTimer {
 public:
  OpTimer(Device device, std::string op);
  ~OpTimer();
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

 private:
  Device device_;
  std::string op_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace ringflow
