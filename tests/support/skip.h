// Skipping a test case that cannot run on this machine (no GPU, running as
// root, a dataset not installed), so that CTest counts it as skipped instead
// of passed: the test main (tests/main.cc) exits 77 when every test case that
// ran was skipped, and tests/CMakeLists.txt sets SKIP_RETURN_CODE 77 on every
// entry and gives each case that can skip an entry of its own.
//
//   if (!has_what_it_needs) return pstrain::test::skip_case("why");
#pragma once

#include <doctest/doctest.h>

#include <string>

namespace pstrain::test {

// How many test cases ran in this process and how many of them skipped.
struct SkipLedger {
  int cases_run = 0;
  int cases_skipped = 0;
  bool current_skipped = false;
};

inline SkipLedger& skip_ledger() {
  static SkipLedger ledger;
  return ledger;
}

// Marks the running test case as skipped, printing "skipped: <reason>". The
// caller returns from the case right after.
inline void skip_case(const std::string& reason) {
  MESSAGE("skipped: " << reason);
  skip_ledger().current_skipped = true;
}

}  // namespace pstrain::test
