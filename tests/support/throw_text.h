// The text of what a call throws: the one helper behind every test's
// "error_of", "rejection" and "decode_error".
#pragma once

#include <exception>
#include <string>
#include <utility>

namespace pstrain::test {

// The what() of the E that `f()` throws; "" when it throws nothing. An
// exception of another type escapes, failing the test that called it.
template <class E = std::exception, class F>
std::string thrown_text(F&& f) {
  try {
    std::forward<F>(f)();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

}  // namespace pstrain::test
