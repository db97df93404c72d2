// A doctest listener that prints "SKIP: <test case>: <why>" for every skipped test case,
// so that the reason shows in the output (and in meson's test log) while doctest counts
// the case as skipped. Why: a default-constructible callable, std::string(test case name).
// Register it once per test executable:
//   DOCTEST_REGISTER_LISTENER("name", 1, ringflow::SkipReasonListener<MyWhy>);
#pragma once

#include <doctest/doctest.h>

#include <ostream>
#include <string>

namespace ringflow {

template <class Why>
struct SkipReasonListener : doctest::IReporter {
  std::ostream& out;
  explicit SkipReasonListener(const doctest::ContextOptions& options) : out(*options.cout) {}
  void test_case_skipped(const doctest::TestCaseData& tc) override {
    out << "SKIP: " << tc.m_name << ": " << Why{}(tc.m_name) << "\n";
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

}  // namespace ringflow
