// The consistency policies through the store (no sockets): sync reduces in
// rank order whatever the arrival order, goes on without a dropped worker;
// ssp answers a pull only within the bound, at every pull of a random
// schedule; the inverse staleness rule applies exactly lr / staleness.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <random>

#include "server/shard_store.h"
#include "tests/support/throw_text.h"

using namespace pstrain;

namespace {

struct Fixture {
  ParamLayout layout;
  ShardMap map;
  OptimizerConfig sgd;
  explicit Fixture(std::int64_t n = 64) {
    layout.add("w", {n});
    map = ShardMap(layout, 1, 1 << 20);
    sgd.name = "sgd";
    sgd.momentum = 0.0;
    sgd.weight_decay = 0.0;
  }
};

StoreOptions options(Mode mode, const OptimizerConfig& optimizer, int bound = 0) {
  StoreOptions o;
  o.consistency = ConsistencyOptions{mode, bound};
  o.optimizer = optimizer;
  return o;
}

using pstrain::test::thrown_text;  // tests/support/throw_text.h

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Gradients whose float sum depends on the order of addition.
std::vector<std::vector<float>> awkward_gradients(int workers, std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mag(-3.0f, 3.0f);
  std::vector<std::vector<float>> g(static_cast<std::size_t>(workers), std::vector<float>(n));
  for (auto& v : g) {
    for (auto& x : v) x = std::ldexp(mag(rng), static_cast<int>(rng() % 40) - 20);
  }
  return g;
}

}  // namespace

TEST_CASE("sync: the mean is reduced in worker-rank order whatever the arrival order (identical bits)") {
  for (int workers : {2, 3, 4, 5}) {
    CAPTURE(workers);
    Fixture f;
    const auto g = awkward_gradients(workers, 64, static_cast<unsigned>(workers));
    // The reference: ((g0 + g1) + g2) ... / W in float, rank by rank.
    std::vector<float> mean = g[0];
    for (int w = 1; w < workers; ++w) {
      for (std::size_t i = 0; i < mean.size(); ++i) mean[i] += g[static_cast<std::size_t>(w)][i];
    }
    for (auto& x : mean) x /= static_cast<float>(workers);
    std::vector<float> expected(64, 1.0f);
    for (std::size_t i = 0; i < expected.size(); ++i) expected[i] -= mean[i];

    std::vector<int> order(static_cast<std::size_t>(workers));
    for (int w = 0; w < workers; ++w) order[static_cast<std::size_t>(w)] = w;
    int orders = 0;
    bool some_order_differs_in_arrival_sum = false;
    do {
      ShardStore store(f.map, 0, workers, options(Mode::kSync, f.sgd));
      store.init(0, std::vector<float>(64, 1.0f));
      std::vector<float> arrival_sum;
      for (std::size_t k = 0; k < order.size(); ++k) {
        const int w = order[k];
        const PushOutcome out = store.push(w, 0, 0, g[static_cast<std::size_t>(w)], 1.0);
        CHECK(out.applied == (k + 1 == order.size()));
        if (arrival_sum.empty()) {
          arrival_sum = g[static_cast<std::size_t>(w)];
        } else {
          for (std::size_t i = 0; i < 64; ++i) arrival_sum[i] += g[static_cast<std::size_t>(w)][i];
        }
      }
      std::vector<float> rank_sum = mean;
      for (auto& x : rank_sum) x *= static_cast<float>(workers);
      if (!same_bits(arrival_sum, rank_sum)) some_order_differs_in_arrival_sum = true;
      REQUIRE(store.version(0) == 1);
      CHECK(same_bits(store.snapshot(0, 0).values(), expected));
      ++orders;
    } while (std::next_permutation(order.begin(), order.end()));
    CHECK(orders > 1);
    // The gradients are chosen so that summing in arrival order would differ:
    // the test would catch a store that adds as pushes come.
    if (workers >= 3) CHECK(some_order_differs_in_arrival_sum);
  }
}

TEST_CASE("sync: a dropped worker is no longer waited for; the update is the mean of those that came") {
  Fixture f(4);
  OptimizerConfig sgd = f.sgd;
  ShardStore store(f.map, 0, 3, options(Mode::kSync, sgd));
  store.init(0, std::vector<float>(4, 10.0f));

  SUBCASE("dropped after the others pushed: the drop completes the step") {
    CHECK_FALSE(store.push(2, 0, 0, std::vector<float>(4, 6.0f), 1.0).applied);
    CHECK_FALSE(store.push(0, 0, 0, std::vector<float>(4, 2.0f), 1.0).applied);
    CHECK(store.drop_worker(1) == std::vector<std::int64_t>{0});
    CHECK(store.version(0) == 1);
    CHECK(store.snapshot(0, 0).values() == std::vector<float>(4, 6.0f));  // 10 - (2 + 6) / 2
    CHECK(store.stats().partial_updates == 1);
  }
  SUBCASE("dropped before the step: the next steps need only the others") {
    CHECK(store.drop_worker(1).empty());
    CHECK_FALSE(store.push(0, 0, 0, std::vector<float>(4, 2.0f), 1.0).applied);
    CHECK(store.push(2, 0, 0, std::vector<float>(4, 4.0f), 1.0).applied);
    CHECK(store.snapshot(0, 0).values() == std::vector<float>(4, 7.0f));
    CHECK(thrown_text<RequestError>([&] { store.push(1, 0, 1, std::vector<float>(4, 1.0f), 1.0); }).find("dropped") !=
          std::string::npos);
    // One it had computed before it was stopped (its step is behind the chunk's version now):
    // refused as a dropped worker's, which it is, not as a stale push.
    const std::string old_step = thrown_text<RequestError>([&] { store.push(1, 0, 0, std::vector<float>(4, 1.0f), 1.0); });
    CHECK(old_step.find("dropped") != std::string::npos);
    CHECK(old_step.find("stale") == std::string::npos);
    CHECK(store.stats().pushes_rejected == 2);
  }
  SUBCASE("a push that came before the drop still counts") {
    CHECK_FALSE(store.push(1, 0, 0, std::vector<float>(4, 9.0f), 1.0).applied);  // waits for rank 0
    CHECK(store.drop_worker(1).empty());
    CHECK_FALSE(store.push(0, 0, 0, std::vector<float>(4, 3.0f), 1.0).applied);
    CHECK(store.push(2, 0, 0, std::vector<float>(4, 6.0f), 1.0).applied);
    CHECK(store.snapshot(0, 0).values() == std::vector<float>(4, 4.0f));  // 10 - (3 + 9 + 6) / 3
    CHECK(store.stats().partial_updates == 0);
  }
}

TEST_CASE("ssp: a pull is answered only when every worker's clock is within the bound") {
  Fixture f(4);
  ShardStore store(f.map, 0, 2, options(Mode::kSsp, f.sgd, 1));
  store.init(0, std::vector<float>(4, 0.0f));
  const std::vector<float> g(4, 1.0f);
  CHECK(store.ready(0, 0, 0));
  CHECK(store.ready(0, 0, 1));        // worker 1's clock 0 >= 1 - 1
  CHECK_FALSE(store.ready(0, 0, 2));  // 2 steps ahead of worker 1
  CHECK(store.push(0, 0, 0, g, 1.0).applied);  // applied on arrival, as in async
  CHECK(store.push(0, 0, 1, g, 1.0).applied);
  CHECK_FALSE(store.ready(0, 0, 2));
  CHECK(store.push(1, 0, 0, g, 1.0).applied);  // the slowest catches up
  CHECK(store.ready(0, 0, 2));
  CHECK_FALSE(store.ready(0, 0, 3));
  store.snapshot(0, 0, 2);
  CHECK(store.stats().clock_gap_max == 1);
  // A dead slow worker blocks the others until the failure policy drops it.
  CHECK(store.drop_worker(1).empty());
  CHECK(store.ready(0, 0, 3));  // only worker 0's own clock (2) counts now
}

TEST_CASE("ssp: on random schedules no answered pull leads the slowest clock by more than s, and nobody deadlocks") {
  for (int bound : {0, 1, 2, 4}) {
    for (int workers : {1, 2, 4, 8}) {
      for (unsigned seed = 1; seed <= 3; ++seed) {
        CAPTURE(bound);
        CAPTURE(workers);
        CAPTURE(seed);
        Fixture f(8);
        ShardStore store(f.map, 0, workers, options(Mode::kSsp, f.sgd, bound));
        store.init(0, std::vector<float>(8, 0.0f));
        constexpr std::int64_t kSteps = 30;
        // Each worker alternates pull(step) -> push(step); a blocked pull
        // waits. Workers are picked at random, worker 0 ten times as often.
        std::vector<std::int64_t> step(static_cast<std::size_t>(workers), 0);
        std::vector<bool> pulled(static_cast<std::size_t>(workers), false);
        std::mt19937 rng(seed);
        std::int64_t max_gap = 0, blocked = 0;
        auto all_done = [&] {
          return std::all_of(step.begin(), step.end(), [](std::int64_t s) { return s == kSteps; });
        };
        int guard = 0;
        while (!all_done()) {
          REQUIRE(++guard < 1000000);
          const int w = rng() % 10 < 5 ? 0 : static_cast<int>(rng() % static_cast<unsigned>(workers));
          auto& s = step[static_cast<std::size_t>(w)];
          if (s == kSteps) continue;
          if (!pulled[static_cast<std::size_t>(w)]) {
            if (!store.ready(0, w, s)) {
              ++blocked;
              continue;
            }
            store.snapshot(w, 0, s);
            std::int64_t slowest = kSteps;
            for (auto other : step) slowest = std::min(slowest, other);  // pushes done = clock
            max_gap = std::max(max_gap, s - slowest);
            REQUIRE(s - slowest <= bound);
            pulled[static_cast<std::size_t>(w)] = true;
          } else {
            store.push(w, 0, s, std::vector<float>(8, 1.0f), 0.5);
            pulled[static_cast<std::size_t>(w)] = false;
            ++s;
          }
        }
        CHECK(store.stats().clock_gap_max == max_gap);
        CHECK(store.version(0) == kSteps * workers);
        if (workers > 1) {
          CHECK(max_gap == bound);  // the fast worker reached the bound: the check above was exercised
          CHECK(blocked > 0);
        }
      }
    }
  }
}

TEST_CASE("staleness rule inverse: a push of staleness t is applied with exactly lr / t") {
  Fixture f(4);
  OptimizerConfig sgd = f.sgd;
  sgd.staleness_rule = "inverse";
  for (Mode mode : {Mode::kAsync, Mode::kSsp}) {
    ShardStore store(f.map, 0, 4, options(mode, sgd, 8));
    store.init(0, std::vector<float>(4, 100.0f));
    for (int w = 0; w < 4; ++w) store.snapshot(w, 0);  // everyone at version 0
    const std::vector<float> g(4, 12.0f);
    CHECK(store.push(0, 0, 0, g, 1.0).staleness == 0);  // lr 1:    100 - 12
    CHECK(store.push(1, 0, 0, g, 1.0).staleness == 1);  // lr 1:     88 - 12
    CHECK(store.push(2, 0, 0, g, 1.0).staleness == 2);  // lr 1/2:   76 - 6
    CHECK(store.push(3, 0, 0, g, 1.0).staleness == 3);  // lr 1/3:   70 - 4
    CHECK(store.snapshot(0, 0).values() == std::vector<float>(4, 66.0f));
  }
  OptimizerConfig none = f.sgd;
  ShardStore plain(f.map, 0, 2, options(Mode::kAsync, none));
  plain.init(0, std::vector<float>(4, 100.0f));
  plain.snapshot(0, 0);
  plain.snapshot(1, 0);
  plain.push(0, 0, 0, std::vector<float>(4, 12.0f), 1.0);
  CHECK(plain.push(1, 0, 0, std::vector<float>(4, 12.0f), 1.0).staleness == 1);
  plain.push(0, 0, 1, std::vector<float>(4, 12.0f), 1.0);  // staleness 2 (pulled at 0), full lr without the rule
  CHECK(plain.snapshot(0, 0).values() == std::vector<float>(4, 64.0f));
}
