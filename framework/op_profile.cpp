#include "ringflow/framework/op_profile.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>

#include "ringflow/kernels/cuda_devices.h"

namespace ringflow {
namespace {

std::atomic<bool> enabled{false}, shapes{false};

struct Table {
  std::mutex mutex;
  std::map<std::string, OpTime> ops;
};

Table& table() {
  static Table t;
  return t;
}

}  // namespace

void set_op_profiling(bool on, bool by_shape) {
  shapes.store(by_shape, std::memory_order_relaxed);
  enabled.store(on, std::memory_order_relaxed);
}
bool op_profiling() { return enabled.load(std::memory_order_relaxed); }
bool op_profiling_by_shape() { return shapes.load(std::memory_order_relaxed); }

std::vector<OpTime> op_times() {
  Table& t = table();
  std::vector<OpTime> out;
  {
    std::lock_guard lock(t.mutex);
    for (const auto& [name, time] : t.ops) out.push_back(time);
  }
  std::sort(out.begin(), out.end(), [](const OpTime& a, const OpTime& b) { return a.total_ms > b.total_ms; });
  return out;
}

void reset_op_times() {
  Table& t = table();
  std::lock_guard lock(t.mutex);
  t.ops.clear();
}

OpTimer::OpTimer(Device device, std::string op) : device_(device), op_(std::move(op)) {
  synchronize(device_);
  start_ = std::chrono::steady_clock::now();
}

OpTimer::~OpTimer() {
  try {
    synchronize(device_);
  } catch (...) {
    return;  // the op's own error surfaces at the next call; a destructor must not throw
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
  Table& t = table();
  std::lock_guard lock(t.mutex);
  OpTime& entry = t.ops[op_];
  entry.op = op_;
  ++entry.calls;
  entry.total_ms += ms;
}

}  // namespace ringflow
