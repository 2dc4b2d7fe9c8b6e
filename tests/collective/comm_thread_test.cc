// CommThread: jobs in submission order, waits with a limit, and a failing
// job stopping the queue.
#include <doctest/doctest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

#include "worker/collective/comm_thread.h"

namespace pstrain {

using namespace std::chrono_literals;

TEST_CASE("jobs run in the order submitted, off the caller's thread") {
  CommThread comm;
  std::vector<int> order;
  const auto caller = std::this_thread::get_id();
  std::atomic<bool> other_thread{true};
  for (int i = 0; i < 50; ++i) {
    comm.submit([&, i] {
      order.push_back(i);
      if (std::this_thread::get_id() == caller) other_thread = false;
    });
  }
  CHECK(comm.wait_idle(10s));
  REQUIRE(order.size() == 50);
  for (int i = 0; i < 50; ++i) CHECK(order[static_cast<std::size_t>(i)] == i);
  CHECK(other_thread);
}

TEST_CASE("wait_idle returns false while a job is still running") {
  CommThread comm;
  std::atomic<bool> release{false};
  comm.submit([&] {
    while (!release) std::this_thread::sleep_for(1ms);
  });
  CHECK_FALSE(comm.wait_idle(20ms));
  release = true;
  CHECK(comm.wait_idle(10s));
}

TEST_CASE("a failing job drops the rest and its error comes back on every call") {
  CommThread comm;
  std::atomic<int> ran{0};
  std::atomic<bool> release{false};
  comm.submit([&] {
    while (!release) std::this_thread::sleep_for(1ms);
    throw std::runtime_error("allreduce failed: peer gone");
  });
  comm.submit([&] { ++ran; });
  release = true;
  CHECK_THROWS_WITH_AS(comm.wait_idle(10s), "allreduce failed: peer gone", std::runtime_error);
  CHECK_THROWS_WITH_AS(comm.submit([&] { ++ran; }), "allreduce failed: peer gone", std::runtime_error);
  CHECK_THROWS_WITH_AS(comm.wait_idle(0ms), "allreduce failed: peer gone", std::runtime_error);
  CHECK(ran == 0);
}

}  // namespace pstrain
