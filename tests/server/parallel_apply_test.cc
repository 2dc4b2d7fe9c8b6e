// The servers' parallel apply (server/parallel_apply.h, ps.apply_threads):
// the ranges cover a loop exactly once, the helpers really run parts at the
// same time, small loops stay on one thread, errors come back, and a shard
// store's weights after N steps are the same bits with 1, 2 and 4 threads
// (sync with the rank-ordered sum and an odd mean, async, SGD with Nesterov
// momentum and weight decay, Adam, float32 and bfloat16 gradients).
#include <doctest/doctest.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>

#include "common/base/errors.h"
#include "server/parallel_apply.h"
#include "server/shard_store.h"
#include "tests/support/throw_text.h"
#include "tests/support/wait.h"

using namespace pstrain;
using namespace std::chrono_literals;

TEST_CASE("split_range: the parts cover [0, n) once, in order, on aligned boundaries") {
  for (std::size_t n : {0u, 1u, 15u, 16u, 17u, 100u, 1000u, 262144u, 262147u}) {
    for (std::size_t parts : {1u, 2u, 3u, 4u, 7u, 8u}) {
      CAPTURE(n);
      CAPTURE(parts);
      std::size_t at = 0;
      for (std::size_t i = 0; i < parts; ++i) {
        const Range r = split_range(n, parts, i);
        CHECK(r.begin == at);
        CHECK(r.end >= r.begin);
        if (r.end != n) CHECK(r.end % 16 == 0);
        at = r.end;
      }
      CHECK(at == n);
    }
  }
}

TEST_CASE("update::offset advances every pointer of a gradient source") {
  const float f[4] = {1, 2, 3, 4};
  const std::uint16_t h[4] = {1, 2, 3, 4};
  update::GradSource g{f, nullptr, 3, f};
  const update::GradSource a = update::offset(g, 2);
  CHECK(a.f32 == f + 2);
  CHECK(a.partial == f + 2);
  CHECK(a.bf16 == nullptr);
  CHECK(a.mean_of == 3);
  const update::GradSource b = update::offset(update::GradSource{nullptr, h, 1, nullptr}, 3);
  CHECK(b.bf16 == h + 3);
  CHECK(b.f32 == nullptr);
  CHECK(b.partial == nullptr);
}

TEST_CASE("default apply threads: the host's cores shared among its servers") {
  CHECK(default_apply_threads(16, 2) == 8);
  CHECK(default_apply_threads(2, 2) == 1);
  CHECK(default_apply_threads(2, 4) == 1);
  CHECK(default_apply_threads(0, 1) == 1);
  ClusterConfig cluster;
  cluster.num_servers = 3;
  CHECK(servers_on_host(cluster, 0) == 3);  // no server_hosts: all on this machine
  cluster.server_hosts = {"a", "b", "a"};
  CHECK(servers_on_host(cluster, 0) == 2);
  CHECK(servers_on_host(cluster, 1) == 1);
  CHECK(resolve_apply_threads(5, cluster, 1) == 5);
  CHECK(resolve_apply_threads(0, cluster, 1) >= 1);
  CHECK(apply_threads_reason(5, cluster, 1) == "ps.apply_threads 5");
  CHECK(apply_threads_reason(0, cluster, 0) ==
        "ps.apply_threads 0: " + std::to_string(std::thread::hardware_concurrency()) + " cores, 2 servers on this host");
}

TEST_CASE("apply pool: every element once, the counts summed, small loops on the caller's thread") {
  for (int threads : {1, 2, 4}) {
    CAPTURE(threads);
    ApplyPool pool(threads, 100);
    CHECK(pool.threads() == threads);
    for (std::size_t n : {0u, 99u, 199u, 200u, 1000u, 100001u}) {
      CAPTURE(n);
      std::vector<std::atomic<int>> seen(n);
      const std::int64_t total = pool.run(n, [&](std::size_t b, std::size_t e) {
        for (std::size_t i = b; i < e; ++i) seen[i].fetch_add(1);
        return static_cast<std::int64_t>(e - b);
      });
      CHECK(total == static_cast<std::int64_t>(n));
      int wrong = 0;
      for (const auto& s : seen) wrong += s.load() == 1 ? 0 : 1;
      CHECK(wrong == 0);
      const std::size_t expected_parts = std::max<std::size_t>(1, std::min<std::size_t>(threads, n / 100));
      CHECK(pool.parts_for(n) == expected_parts);
    }
    CHECK(pool.stats().runs == 6);
    CHECK(pool.stats().split_runs == (threads == 1 ? 0 : 3));  // 200, 1000, 100001 elements
  }
  CHECK(pstrain::test::thrown_text([] { ApplyPool(0, 1); }).find("ps.apply_threads") != std::string::npos);
}

TEST_CASE("apply pool: the parts of a split loop run at the same time, on different threads") {
  // Each part waits until all 4 have started: only 4 threads at once get
  // past it (one thread running the parts in turn would wait forever).
  ApplyPool pool(4, 16);
  std::atomic<int> started{0};
  std::mutex mutex;
  std::set<std::thread::id> ids;
  const std::int64_t ok = pool.run(4 * 1024, [&](std::size_t, std::size_t) -> std::int64_t {
    {
      std::lock_guard<std::mutex> lock(mutex);
      ids.insert(std::this_thread::get_id());
    }
    started.fetch_add(1);
    return pstrain::test::wait_until([&] { return started.load() == 4; }, 60s, "all 4 parts running") ? 1 : 0;
  });
  CHECK(ok == 4);
  CHECK(ids.size() == 4);
  CHECK(ids.count(std::this_thread::get_id()) == 1);  // the caller is one of them
}

TEST_CASE("apply pool: an exception from a part comes back once every part has ended, and the pool goes on") {
  ApplyPool pool(3, 10);
  std::atomic<int> ended{0};
  const std::string text = pstrain::test::thrown_text([&] {
    pool.run(3000, [&](std::size_t b, std::size_t) -> std::int64_t {
      ended.fetch_add(1);
      if (b == 0) throw ComputeError("part 0 failed");
      return 0;
    });
  });
  CHECK(text == "part 0 failed");
  CHECK(ended.load() == 3);
  CHECK(pool.run(3000, [](std::size_t b, std::size_t e) { return static_cast<std::int64_t>(e - b); }) == 3000);
}

namespace {

struct Scenario {
  Mode mode = Mode::kSync;
  std::string optimizer = "sgd";
  int workers = 3;
  bool bf16 = false;
  bool reverse = false;  // pushes highest rank first: early arrivals, then the sum
};

// The weights of a one-chunk store of n elements after `steps` steps of
// pseudo-random gradients (the same for every thread count), pushed by every
// worker, applied with `threads` apply threads and parts of 64 elements.
std::vector<float> train(const Scenario& s, int threads, std::size_t n, int steps) {
  ParamLayout layout;
  layout.add("w", {static_cast<std::int64_t>(n)});
  const ShardMap map(layout, 1, static_cast<std::int64_t>(n * sizeof(float)));
  ApplyPool pool(threads, 64);
  StoreOptions o;
  o.consistency = ConsistencyOptions{s.mode, 0};
  o.optimizer.name = s.optimizer;
  o.optimizer.momentum = 0.9;
  o.optimizer.nesterov = true;
  o.optimizer.weight_decay = 5e-4;
  o.ranges = &pool;
  ShardStore store(map, 0, s.workers, o);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> init(n);
  for (float& x : init) x = normal(rng);
  store.init(0, init);
  std::vector<float> g(n);
  std::vector<std::uint16_t> h(n);
  for (int step = 0; step < steps; ++step) {
    for (int i = 0; i < s.workers; ++i) {
      const int w = s.reverse ? s.workers - 1 - i : i;
      for (float& x : g) x = normal(rng);
      if (s.bf16) {
        for (std::size_t k = 0; k < n; ++k) {
          std::uint32_t bits = 0;
          std::memcpy(&bits, &g[k], 4);
          h[k] = static_cast<std::uint16_t>(bits >> 16);
        }
        store.push(w, 0, step, std::span<const std::uint16_t>(h), 0.01);
      } else {
        store.push(w, 0, step, std::span<const float>(g), 0.01);
      }
    }
  }
  if (threads > 1) CHECK(pool.stats().split_runs > 0);
  return store.snapshot(-1, 0, steps).values();
}

}  // namespace

TEST_CASE("parallel apply: the weights after N steps are the same bits with 1, 2 and 4 threads") {
  std::vector<Scenario> scenarios;
  for (Mode mode : {Mode::kSync, Mode::kAsync}) {
    for (const char* opt : {"sgd", "adam"}) {
      for (bool bf16 : {false, true}) {
        for (bool reverse : {false, true}) scenarios.push_back(Scenario{mode, opt, 3, bf16, reverse});
      }
    }
  }
  scenarios.push_back(Scenario{Mode::kSync, "sgd", 4, false, false});  // a power-of-two mean
  for (const Scenario& s : scenarios) {
    CAPTURE(static_cast<int>(s.mode));
    CAPTURE(s.optimizer);
    CAPTURE(s.bf16);
    CAPTURE(s.reverse);
    CAPTURE(s.workers);
    const std::size_t n = 4099;  // not a multiple of the alignment: the last part is short
    const std::vector<float> one = train(s, 1, n, 5);
    for (int threads : {2, 4}) {
      CAPTURE(threads);
      const std::vector<float> many = train(s, threads, n, 5);
      REQUIRE(many.size() == one.size());
      CHECK(std::memcmp(many.data(), one.data(), one.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("parallel apply: a non-finite gradient is rejected whole, with the count of one thread") {
  ParamLayout layout;
  layout.add("w", {1000});
  const ShardMap map(layout, 1, 4000);
  ApplyPool pool(4, 64);
  StoreOptions o;
  o.consistency = ConsistencyOptions{Mode::kSync, 0};
  o.optimizer.name = "sgd";
  o.ranges = &pool;
  ShardStore store(map, 0, 2, o);
  store.init(0, std::vector<float>(1000, 1.0f));
  std::vector<float> g(1000, 0.5f);
  g[10] = std::numeric_limits<float>::quiet_NaN();
  g[900] = std::numeric_limits<float>::infinity();  // another part than element 10's
  // Worker 0's push goes into the sum (copy pass), worker 1's would complete
  // the step in the update's pass: both passes are split.
  for (int w = 0; w < 2; ++w) {
    CAPTURE(w);
    if (w == 1) store.push(0, 0, 0, std::vector<float>(1000, 0.5f), 0.1);
    const std::string text = pstrain::test::thrown_text([&] { store.push(w, 0, 0, g, 0.1); });
    CHECK(text.find("2 non-finite values (first at element 10)") != std::string::npos);
  }
  CHECK(store.version(0) == 0);
  const std::vector<float> w = store.snapshot(-1, 0, 0).values();
  CHECK(w == std::vector<float>(1000, 1.0f));
  CHECK(pool.stats().split_runs >= 2);
}
