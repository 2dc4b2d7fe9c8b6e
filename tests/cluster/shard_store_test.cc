// The server's update logic without sockets: sync aggregation is the exact
// mean, async applies each push once, a repeated push is acknowledged and
// not applied again, early pushes and NaN are rejected.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "server/shard_store.h"
#include "tests/support/throw_text.h"

using namespace pstrain;

namespace {

struct Fixture {
  ParamLayout layout;
  ShardMap map;
  OptimizerConfig sgd;
  Fixture(std::int64_t n = 6) {
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

std::vector<float> constant(std::size_t n, float v) { return std::vector<float>(n, v); }

using pstrain::test::thrown_text;  // tests/support/throw_text.h

}  // namespace

TEST_CASE("sync: one update per step with the exact mean of integer gradients") {
  for (int workers = 1; workers <= 4; ++workers) {
    CAPTURE(workers);
    Fixture f;
    ShardStore store(f.map, 0, workers, options(Mode::kSync, f.sgd));
    store.init(0, constant(6, 100.0f));
    std::vector<float> expected = constant(6, 100.0f);
    for (int step = 0; step < 3; ++step) {
      CHECK(store.ready(0, 0, step));
      CHECK_FALSE(store.ready(0, 0, step + 1));
      std::vector<float> sum(6, 0.0f);
      for (int w = 0; w < workers; ++w) {
        std::vector<float> g(6);
        for (int i = 0; i < 6; ++i) g[static_cast<std::size_t>(i)] = static_cast<float>((w + 1) * (i + 1) + step);
        for (int i = 0; i < 6; ++i) sum[static_cast<std::size_t>(i)] += g[static_cast<std::size_t>(i)];
        const PushOutcome out = store.push(w, 0, step, g, 1.0);
        CHECK(out.applied == (w == workers - 1));
      }
      for (int i = 0; i < 6; ++i) expected[static_cast<std::size_t>(i)] -= sum[static_cast<std::size_t>(i)] / static_cast<float>(workers);
      CHECK(store.version(0) == step + 1);
    }
    const auto snap = store.snapshot(0, 0);
    CHECK(snap.values() == expected);
    CHECK(store.stats().updates_applied == 3);
  }
}

TEST_CASE("sync: a repeated push is acknowledged, not applied; an early push is rejected") {
  Fixture f;
  ShardStore store(f.map, 0, 2, options(Mode::kSync, f.sgd));
  store.init(0, constant(6, 0.0f));
  store.push(0, 0, 0, constant(6, 2.0f), 1.0);
  // The same (worker, step, chunk) again, even with another gradient: counted once.
  const PushOutcome again = store.push(0, 0, 0, constant(6, 100.0f), 1.0);
  CHECK_FALSE(again.applied);
  CHECK(again.version == 0);
  CHECK(thrown_text<RequestError>([&] { store.push(1, 0, 1, constant(6, 2.0f), 1.0); }).find("ahead of the chunk's version 0") !=
        std::string::npos);
  CHECK(store.push(1, 0, 0, constant(6, 4.0f), 1.0).applied);  // completes step 0: mean 3
  // After the update, a resend of either step-0 push is still acknowledged only.
  CHECK(store.push(1, 0, 0, constant(6, 4.0f), 1.0).version == 1);
  CHECK_FALSE(store.skip(0, 0, 0).applied);
  CHECK(store.snapshot(0, 0).values() == constant(6, -3.0f));
  CHECK(store.stats().pushes_rejected == 1);
  CHECK(store.stats().duplicate_pushes == 3);
  CHECK(store.stats().pushes_accepted == 2);
  CHECK(store.stats().updates_applied == 1);
  CHECK(store.version(0) == 1);
}

TEST_CASE("async: every push applied once, staleness recorded") {
  Fixture f;
  ShardStore store(f.map, 0, 2, options(Mode::kAsync, f.sgd));
  store.init(0, constant(6, 0.0f));
  store.snapshot(0, 0);  // both pull version 0
  store.snapshot(1, 0);
  CHECK(store.push(0, 0, 0, constant(6, 1.0f), 1.0).staleness == 0);
  CHECK(store.push(1, 0, 0, constant(6, 2.0f), 1.0).staleness == 1);  // one update since worker 1 pulled
  CHECK(store.push(1, 0, 1, constant(6, 4.0f), 0.5).staleness == 2);
  // Repeats of pushes already applied: acknowledged, not applied again.
  CHECK_FALSE(store.push(1, 0, 1, constant(6, 4.0f), 1.0).applied);
  CHECK_FALSE(store.push(1, 0, 0, constant(6, 4.0f), 1.0).applied);
  CHECK(store.stats().duplicate_pushes == 2);
  CHECK(store.snapshot(0, 0).values() == constant(6, -5.0f));  // -1 -2 -0.5*4
  CHECK(store.version(0) == 3);
  CHECK(store.stats().staleness_histogram.at(0) == 1);
  CHECK(store.stats().staleness_histogram.at(1) == 1);
  CHECK(store.stats().staleness_histogram.at(2) == 1);
}

TEST_CASE("bad pushes: NaN, wrong size, unknown worker, uninitialized, not owner") {
  Fixture f;
  ShardStore store(f.map, 0, 2, options(Mode::kAsync, f.sgd));
  CHECK(thrown_text<RequestError>([&] { store.push(0, 0, 0, constant(6, 1.0f), 1.0); }).find("not initialized") != std::string::npos);
  store.init(0, constant(6, 1.0f));
  CHECK(thrown_text<RequestError>([&] { store.init(0, constant(6, 1.0f)); }).find("already initialized") != std::string::npos);
  std::vector<float> nan_grad = constant(6, 1.0f);
  nan_grad[4] = std::numeric_limits<float>::quiet_NaN();
  nan_grad[5] = std::numeric_limits<float>::infinity();
  CHECK(thrown_text<RequestError>([&] { store.push(0, 0, 0, nan_grad, 1.0); })
            .find("push of chunk 0 from worker 0 at step 0: gradient has 2 non-finite values (first at element 4)") !=
        std::string::npos);
  CHECK(store.snapshot(0, 0).values() == constant(6, 1.0f));  // nothing applied
  CHECK(thrown_text<RequestError>([&] { store.push(0, 0, 0, constant(5, 1.0f), 1.0); }).find("expected 6 elements, got 5") !=
        std::string::npos);
  CHECK(thrown_text<RequestError>([&] { store.push(7, 0, 0, constant(6, 1.0f), 1.0); }).find("worker rank outside [0, 2)") !=
        std::string::npos);
  CHECK(thrown_text<RequestError>([&] { store.push(0, 0, 0, constant(6, 1.0f), -1.0); }).find("invalid learning rate") !=
        std::string::npos);
  try {
    store.push(0, 9, 0, constant(6, 1.0f), 1.0);
    FAIL("not-owner push accepted");
  } catch (const RequestError& e) {
    CHECK(e.status() == Status::kNotOwner);
  }
  // The NaN push was not recorded as this worker's step: a clean retry works.
  CHECK(store.push(0, 0, 0, constant(6, 1.0f), 1.0).applied);
}

TEST_CASE("copy on write keeps a sent snapshot intact") {
  Fixture f;
  ShardStore store(f.map, 0, 1, options(Mode::kAsync, f.sgd));
  store.init(0, constant(6, 1.0f));
  const auto held = store.snapshot(0, 0);  // as a zero-copy pull reply would hold it
  store.push(0, 0, 0, constant(6, 1.0f), 1.0);
  CHECK(held.values() == constant(6, 1.0f));
  CHECK(store.snapshot(0, 0).values() == constant(6, 0.0f));
}

// The server takes its checkpoint copies only at step boundaries: a push,
// skip or drop that moved the chunk's slowest live clock says so
// (PushOutcome::clock_advanced); a push that leaves it where it was does not.
TEST_CASE("a push says when it moved the chunk's slowest clock (a step boundary)") {
  for (const Mode mode : {Mode::kSync, Mode::kAsync, Mode::kSsp}) {
    CAPTURE(mode);
    Fixture f;
    ShardStore store(f.map, 0, 3, options(mode, f.sgd, 2));
    store.init(0, constant(6, 1.0f));
    for (std::int64_t step = 0; step < 2; ++step) {
      CHECK_FALSE(store.push(0, 0, step, constant(6, 1.0f), 0.5).clock_advanced);
      CHECK_FALSE(store.skip(2, 0, step).clock_advanced);
      CHECK(store.slowest_clock(0) == step);
      CHECK(store.push(1, 0, step, constant(6, 1.0f), 0.5).clock_advanced);  // the last of the step
      CHECK(store.slowest_clock(0) == step + 1);
      CHECK_FALSE(store.push(1, 0, step, constant(6, 1.0f), 0.5).clock_advanced);  // a repeat
    }
    // Worker 2 alone still to push step 2: it is the slowest, and its push moves the clock.
    CHECK_FALSE(store.push(0, 0, 2, constant(6, 1.0f), 0.5).clock_advanced);
    CHECK_FALSE(store.push(1, 0, 2, constant(6, 1.0f), 0.5).clock_advanced);
    CHECK(store.push(2, 0, 2, constant(6, 1.0f), 0.5).clock_advanced);
    CHECK(store.slowest_clock(0) == 3);
  }
}
