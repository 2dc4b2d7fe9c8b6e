// Helpers of the collective tests: run one function per rank on threads of
// this process, each rank with its own Gloo collective over loopback TCP and
// one shared in-process rendezvous store.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "worker/collective/collective_factory.h"
#include "worker/collective/in_process_store.h"
#include "tests/support/throw_text.h"

namespace pstrain::testing {

inline CollectiveOptions rank_options(int rank, int size, int timeout_ms = 20000) {
  CollectiveOptions o;
  o.rank = rank;
  o.size = size;
  o.timeout = std::chrono::milliseconds(timeout_ms);
  o.host = "127.0.0.1";
  return o;
}

// Runs body(rank, collective) for ranks 0..size-1 on their own threads;
// rethrows the first failure (lowest rank first) after all have ended.
inline void run_ranks(int size, const std::function<void(int, Collective&)>& body, int timeout_ms = 20000) {
  InProcessStore store;
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        std::unique_ptr<Collective> c = make_collective("gloo", rank_options(r, size, timeout_ms), store);
        body(r, *c);
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

// The message of what `f` throws, "" when nothing.
using pstrain::test::thrown_text;

}  // namespace pstrain::testing
