// Skip logic shared by the CUDA tests: mark a device case `* doctest::skip(kNoDevice)`
// and, without a usable device, doctest skips it while the listener prints
// "SKIP: <test case>: <why>" (no GPU, the stub driver's error 35, or a build without CUDA).
// Include it from one file per test executable.
#pragma once

#include <doctest/doctest.h>

#include <ostream>
#include <string>

#include "kernels/cuda_devices.h"

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

// Prints "SKIP: <test case>: <why>" for every skipped test case, so the reason shows in
// the output (and in meson's test log) while doctest counts the case as skipped.
struct SkipReasonListener : doctest::IReporter {
  std::ostream& out;
  explicit SkipReasonListener(const doctest::ContextOptions& options) : out(*options.cout) {}
  void test_case_skipped(const doctest::TestCaseData& tc) override {
    out << "SKIP: " << tc.m_name << ": " << cuda_status().why << "\n";
  }
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
};

DOCTEST_REGISTER_LISTENER("cuda_skip_reason", 1, SkipReasonListener);

}  // namespace ringflow
