// Waiting for an event instead of sleeping for it: poll a condition until it
// holds or a limit passes. The limit only bounds a test that is already
// failing (a hang), so it is generous; it is never the thing under test.
#pragma once

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>

namespace pstrain::test {

// True as soon as `condition()` holds; false once `limit` has passed without
// it, after printing "timed out after N ms waiting for <what>" to stderr so a
// failing test names the event that did not happen. Polls every 1 ms at
// first, backing off to every 50 ms.
inline bool wait_until(const std::function<bool()>& condition, std::chrono::milliseconds limit,
                       const std::string& what) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + limit;
  std::chrono::milliseconds pause(1);
  while (!condition()) {
    if (clock::now() > deadline) {
      std::fprintf(stderr, "timed out after %lld ms waiting for %s\n", static_cast<long long>(limit.count()),
                   what.c_str());
      return false;
    }
    std::this_thread::sleep_for(pause);
    if (pause < std::chrono::milliseconds(50)) pause *= 2;
  }
  return true;
}

}  // namespace pstrain::test
