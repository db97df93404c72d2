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

void set_op_profiling(bool on);
bool op_profiling();
// The ops timed since the last reset, the most expensive first.
std::vector<OpTime> op_times();
void reset_op_times();

// Times one kernel call: waits for `device` now and again when it goes out of scope.
class OpTimer {
 public:
  OpTimer(Device device, const char* op);
  ~OpTimer();
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

 private:
  Device device_;
  const char* op_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace ringflow
