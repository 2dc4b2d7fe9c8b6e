// The doctest main shared by every test executable. It exits 77 (CTest's
// SKIP_RETURN_CODE, tests/CMakeLists.txt) when test cases ran, none failed
// and every one of them was skipped (tests/support/skip.h), and fails when
// no test case ran at all (filters that match nothing: a CTest entry that
// tests nothing must not pass).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "tests/support/skip.h"

namespace {

// Whether doctest answered a query (--list-test-cases, --count, --help...)
// instead of running test cases.
bool queried = false;

// Counts the test cases run and those that called skip_case.
struct SkipCounter : doctest::IReporter {
  explicit SkipCounter(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override { queried = true; }
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData&) override { pstrain::test::skip_ledger().current_skipped = false; }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {
    pstrain::test::SkipLedger& ledger = pstrain::test::skip_ledger();
    ++ledger.cases_run;
    if (ledger.current_skipped) ++ledger.cases_skipped;
    ledger.current_skipped = false;
  }
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

REGISTER_LISTENER("skip_counter", 1, SkipCounter);

}  // namespace

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  const int result = context.run();
  if (context.shouldExit() || queried || result != 0) return result;
  const pstrain::test::SkipLedger& ledger = pstrain::test::skip_ledger();
  if (ledger.cases_run == 0) {
    std::fprintf(stderr, "no test case matched the filters\n");
    return 1;
  }
  if (ledger.cases_skipped == ledger.cases_run) return 77;
  return 0;
}
