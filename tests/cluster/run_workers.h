// Runs `body(rank)` on one thread per worker of an in-process cluster test
// and rethrows the first failure once all have ended.
#pragma once

#include <exception>
#include <functional>
#include <thread>
#include <vector>

namespace pstrain::test {

inline void run_workers(int workers, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(workers));
  for (int r = 0; r < workers; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace pstrain::test
