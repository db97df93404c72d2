// Skip logic shared by the CUDA tests: mark a device case `* doctest::skip(kNoDevice)`
// and, without a usable device, doctest skips it while the listener prints
// "SKIP: <test case>: <why>" (no GPU, the stub driver's error 35, or a build without CUDA).
// Include it from one file per test executable.
#pragma once

#include <doctest/doctest.h>

#include <string>

#include "ringflow/kernels/cuda_devices.h"
#include "ringflow/tests/skip_listener.h"

namespace ringflow {

struct CudaStatus {
  int count = 0;
  std::string why;
};

inline const CudaStatus& cuda_status() {
  static const CudaStatus status = [] {
    CudaStatus s;
    s.count = cuda_device_count(&s.why);
    return s;
  }();
  return status;
}

// Evaluated during static initialisation, before the test cases that include this register.
inline const bool kNoDevice = cuda_status().count == 0;

struct CudaSkipWhy {
  std::string operator()(const std::string&) const { return cuda_status().why; }
};

DOCTEST_REGISTER_LISTENER("cuda_skip_reason", 1, SkipReasonListener<CudaSkipWhy>);

}  // namespace ringflow
