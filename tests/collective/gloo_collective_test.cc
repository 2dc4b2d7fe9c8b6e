// The Gloo collective among 1..4 ranks (threads of this process over
// loopback TCP): exact means of integer-valued floats at awkward sizes,
// overlapping operations, broadcast, barrier, and its errors.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <thread>
#include <vector>
#include <numeric>

#include "collective_test_util.h"
#include "common/base/errors.h"
#include "worker/collective/in_process_store.h"

namespace pstrain {
namespace {

using testing::thrown_text;
using testing::run_ranks;

// Rank r's element i: W * ((i mod 17) + r). The mean over the ranks,
// W * (i mod 17) + W (W - 1) / 2, is an integer and exact in float.
float value(std::size_t i, int rank, int size) { return static_cast<float>(size * (static_cast<int>(i % 17) + rank)); }
float mean_value(std::size_t i, int size) {
  return static_cast<float>(size * static_cast<int>(i % 17) + size * (size - 1) / 2);
}

}  // namespace

TEST_CASE("gloo allreduce_mean is exact for 1..4 ranks at sizes 0, 1, 7, 1000 and 2^20") {
  for (int size = 1; size <= 4; ++size) {
    CAPTURE(size);
    std::atomic<int> wrong{0};
    run_ranks(size, [&](int rank, Collective& c) {
      CHECK(c.rank() == rank);
      CHECK(c.size() == size);
      CHECK_FALSE(c.device_memory());
      for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{1} << 20}) {
        std::vector<float> x(n);
        for (std::size_t i = 0; i < n; ++i) x[i] = value(i, rank, size);
        c.allreduce_mean(x.data(), n);
        for (std::size_t i = 0; i < n; ++i) wrong += x[i] != mean_value(i, size) ? 1 : 0;
      }
    });
    CHECK(wrong == 0);
  }
}

TEST_CASE("gloo: operations started back to back complete in order without the caller waiting between") {
  std::atomic<int> wrong{0};
  run_ranks(3, [&](int rank, Collective& c) {
    std::vector<float> x(10000);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = value(i, rank, 3);
    // Like gradient buckets: the top of the buffer first, then the rest in pieces.
    c.start_allreduce_mean(x.data() + 6000, 4000);
    c.start_allreduce_mean(x.data() + 1000, 5000);
    c.start_allreduce_mean(x.data() + 3, 997);
    c.start_allreduce_mean(x.data(), 3);
    while (!c.wait_all(std::chrono::milliseconds(10))) {
    }
    CHECK(c.wait_all(std::chrono::milliseconds(0)));
    for (std::size_t i = 0; i < x.size(); ++i) wrong += x[i] != mean_value(i, 3) ? 1 : 0;
  });
  CHECK(wrong == 0);
}

TEST_CASE("gloo mean of two ranks equals the sync servers' (a + b) * 0.5 bit for bit") {
  std::vector<std::vector<float>> results(2);
  auto input = [](int rank, std::size_t i) { return 0.1f * static_cast<float>(i) + 1.0f / static_cast<float>(rank + 3); };
  run_ranks(2, [&](int rank, Collective& c) {
    std::vector<float> x(4099);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = input(rank, i);
    c.allreduce_mean(x.data(), x.size());
    results[static_cast<std::size_t>(rank)] = x;
  });
  int wrong = 0;
  for (std::size_t i = 0; i < 4099; ++i) {
    const float expected = (input(0, i) + input(1, i)) * 0.5f;
    wrong += results[0][i] != expected || results[1][i] != expected ? 1 : 0;
  }
  CHECK(wrong == 0);
}

TEST_CASE("gloo broadcast copies the root's data to every rank, and barrier returns on all") {
  for (int root : {0, 2}) {
    CAPTURE(root);
    std::atomic<int> wrong{0};
    std::atomic<int> after_barrier{0};
    run_ranks(3, [&](int rank, Collective& c) {
      std::vector<float> x(777, static_cast<float>(rank));
      c.broadcast(x.data(), x.size(), root);
      for (float v : x) wrong += v != static_cast<float>(root) ? 1 : 0;
      c.barrier();
      ++after_barrier;
    });
    CHECK(wrong == 0);
    CHECK(after_barrier == 3);
  }
}

TEST_CASE("gloo broadcast with a root outside the ranks is refused") {
  run_ranks(2, [&](int, Collective& c) {
    std::vector<float> x(4);
    CHECK(thrown_text([&] { c.broadcast(x.data(), x.size(), 2); }).find("gloo broadcast") != std::string::npos);
    CHECK(thrown_text([&] { c.broadcast(x.data(), x.size(), -1); }).find("root -1 outside [0, 2)") != std::string::npos);
    c.barrier();
  });
}

TEST_CASE("gloo: a peer that leaves makes the allreduce fail with a TransportError naming it, and every later call") {
  std::string first, second;
  run_ranks(2, [&](int rank, Collective& c) {
    c.barrier();
    if (rank == 1) return;  // its collective is destroyed: the connection closes
    std::vector<float> x(1000, 1.0f);
    try {
      c.allreduce_mean(x.data(), x.size());
    } catch (const TransportError& e) {
      first = e.what();
    }
    second = thrown_text([&] { c.start_allreduce_mean(x.data(), x.size()); });
  });
  CHECK(first.find("gloo allreduce of 1000 floats (rank 0 of 2)") != std::string::npos);
  CHECK(second == first);
}

TEST_CASE("gloo rendezvous without the other rank times out naming the store key") {
  InProcessStore store;
  const std::string err = thrown_text([&] { make_collective("gloo", testing::rank_options(0, 2, 300), store); });
  CHECK(err.find("store get of key 'collective/gloo/") != std::string::npos);
  CHECK(err.find("within 300 ms") != std::string::npos);
}

// A re-formed collective connects under a short connect timeout (the
// heartbeat timeout: allreduce_node.cc); its ranks arrive when each learns of
// the change, seconds apart on a loaded machine. Before the ranks met in the
// store first, Gloo waited for the late rank's address under the short
// timeout too, and every rank failed ("no node set it within"): the job's
// cascade. The lateness past the connect timeout is what is tested here.
TEST_CASE("gloo with a short connect timeout: a rank arriving later than it still connects") {
  InProcessStore store;
  constexpr int kSize = 3;
  std::vector<std::exception_ptr> errors(kSize);
  std::atomic<int> wrong{0};
  const auto rank_body = [&](int rank) {
    try {
      CollectiveOptions o = testing::rank_options(rank, kSize);
      o.connect_timeout = std::chrono::milliseconds(400);
      std::unique_ptr<Collective> c = make_collective("gloo", o, store);
      std::vector<float> x(1000);
      for (std::size_t i = 0; i < x.size(); ++i) x[i] = value(i, rank, kSize);
      c->allreduce_mean(x.data(), x.size());
      for (std::size_t i = 0; i < x.size(); ++i) wrong += x[i] != mean_value(i, kSize) ? 1 : 0;
    } catch (...) {
      errors[static_cast<std::size_t>(rank)] = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  threads.emplace_back(rank_body, 0);
  threads.emplace_back(rank_body, 2);
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (store.waiting() < 1 && std::chrono::steady_clock::now() < limit) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(2000));  // rank 1: 5x the connect timeout late
  threads.emplace_back(rank_body, 1);
  for (auto& t : threads) t.join();
  for (int r = 0; r < kSize; ++r) {
    CAPTURE(r);
    CHECK(thrown_text([&] {
            if (errors[static_cast<std::size_t>(r)]) std::rethrow_exception(errors[static_cast<std::size_t>(r)]);
          }) == "");
  }
  CHECK(wrong == 0);
}

}  // namespace pstrain
