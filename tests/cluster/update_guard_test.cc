// The server owns what it applies (ShardStore, server/shard_store.h): a push's
// learning rate is bounded by the schedule's highest (StoreOptions::max_lr),
// and an update whose result would hold a NaN or Inf is not committed:
// async and ssp refuse the push, naming its worker; sync refuses the step,
// naming its contributors, and completes it with the weights as they were.
// Each rule is fed its bad input here; every refusal leaves the weights,
// version and optimizer state as they were and is counted against the pusher.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "server/shard_store.h"
#include "tests/support/throw_text.h"

using namespace pstrain;
using pstrain::test::thrown_text;

namespace {

constexpr std::size_t kElems = 6;
constexpr float kMax = std::numeric_limits<float>::max();

struct Store {
  ParamLayout layout;
  ShardMap map;
  std::unique_ptr<ShardStore> store;
  Store(Mode mode, int workers, double max_lr, const std::string& optimizer = "sgd", double momentum = 0.0,
        float initial = 1.0f) {
    layout.add("w", {static_cast<std::int64_t>(kElems)});
    map = ShardMap(layout, 1, 1 << 20);
    StoreOptions o;
    o.consistency = ConsistencyOptions{mode, mode == Mode::kSsp ? 1 : 0};
    o.optimizer.name = optimizer;
    o.optimizer.momentum = momentum;
    o.optimizer.weight_decay = 0.0;
    o.optimizer.lr = max_lr;
    o.max_lr = max_lr;
    store = std::make_unique<ShardStore>(map, 0, workers, o);
    store->init(0, std::vector<float>(kElems, initial));
  }
  ShardStore* operator->() { return store.get(); }
  std::vector<float> weights() { return store->snapshot(-1, 0).values(); }
};

std::vector<float> constant(float v) { return std::vector<float>(kElems, v); }

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

bool all_finite(const std::vector<float>& values) {
  for (const float x : values) {
    if (!std::isfinite(x)) return false;
  }
  return true;
}

// The refusals noted since the last call, as "worker: why" lines.
std::string refusals(Store& s) {
  std::string out;
  for (const ShardStore::Refusal& r : s->take_refusals()) out += std::to_string(r.worker) + ": " + r.why + "\n";
  return out;
}

}  // namespace

TEST_CASE("lr bound: a push above the schedule's highest rate is refused, naming the pusher; at the bound it applies") {
  for (const Mode mode : {Mode::kAsync, Mode::kSsp, Mode::kSync}) {
    CAPTURE(to_string(mode));
    Store s(mode, 2, 0.05);
    const std::vector<float> before = s.weights();
    const std::string why = thrown_text<RequestError>([&] { s->push(1, 0, 0, constant(1.0f), 1e30); });
    CHECK(has(why, "push of chunk 0 from worker 1 at step 0: learning rate 1e+30 is above the schedule's highest, 0.05"));
    CHECK(has(why, "not applied"));
    CHECK(s.weights() == before);
    CHECK(s->version(0) == 0);
    CHECK(s->stats().refused_by_worker.at(1) == 1);
    CHECK(s->stats().pushes_rejected == 1);
    const std::string noted = refusals(s);
    CHECK(has(noted, "1: push of chunk 0 from worker 1 at step 0: learning rate 1e+30"));
    // Just above the bound (more than the rounding tolerance) is refused too; at the bound, and
    // within the tolerance, a push is taken.
    CHECK_THROWS_AS(s->push(1, 0, 0, constant(1.0f), 0.05 * (1 + 1e-5)), RequestError);
    CHECK_NOTHROW(s->push(0, 0, 0, constant(1.0f), 0.05));
    CHECK_NOTHROW(s->push(1, 0, 0, constant(1.0f), 0.05 * (1 + 1e-7)));
    CHECK(s->version(0) == (mode == Mode::kSync ? 1 : 2));
    CHECK(all_finite(s.weights()));
    CHECK(s.weights() != before);
    CHECK(s->stats().refused_by_worker.at(1) == 2);
    CHECK(s->stats().refused_by_worker.count(0) == 0);
  }
}

TEST_CASE("lr bound: a NaN, infinite or negative rate is refused as a bad request, naming the pusher") {
  for (const Mode mode : {Mode::kAsync, Mode::kSync}) {
    CAPTURE(to_string(mode));
    Store s(mode, 2, 0.05);
    for (const double lr : {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(), -0.01}) {
      CAPTURE(lr);
      try {
        s->push(1, 0, 0, constant(1.0f), lr);
        FAIL("accepted");
      } catch (const RequestError& e) {
        CHECK(e.status() == Status::kBadRequest);
        CHECK(e.blamed() == 1);
        CHECK(has(e.what(), "push of chunk 0 from worker 1 at step 0: invalid learning rate"));
      }
    }
    CHECK(s->stats().refused_by_worker.at(1) == 3);
    CHECK(s.weights() == constant(1.0f));
  }
}

TEST_CASE("no bound (max_lr 0: a store built by hand) takes any finite rate, as before") {
  ParamLayout layout;
  layout.add("w", {static_cast<std::int64_t>(kElems)});
  const ShardMap map(layout, 1, 1 << 20);
  StoreOptions o;
  o.consistency = ConsistencyOptions{Mode::kAsync, 0};
  o.optimizer.momentum = 0.0;
  ShardStore store(map, 0, 1, o);
  store.init(0, constant(1.0f));
  CHECK_NOTHROW(store.push(0, 0, 0, constant(1.0f), 100.0));
  CHECK(store.snapshot(0, 0).values() == constant(-99.0f));
}

TEST_CASE("async, ssp: a finite gradient whose update overflows to Inf is refused, the weights unchanged") {
  for (const Mode mode : {Mode::kAsync, Mode::kSsp}) {
    CAPTURE(to_string(mode));
    // Weights near the float maximum and a rate within the bound: w - lr * g overflows.
    Store s(mode, 2, 10.0, "sgd", 0.0, kMax / 2);
    std::vector<float> g = constant(0.0f);
    g[3] = -kMax / 2;
    const std::string why = thrown_text<RequestError>([&] { s->push(1, 0, 0, g, 10.0); });
    CHECK(has(why, "push of chunk 0 from worker 1 at step 0: the update would make 1 weights or optimizer values non-finite"));
    CHECK(has(why, "first at element 3: weight 1.70141173e+38 -> inf (gradient -1.70141173e+38, lr 10)"));
    CHECK(s.weights() == constant(kMax / 2));
    CHECK(s->version(0) == 0);
    CHECK(s->stats().refused_by_worker.at(1) == 1);
    CHECK(has(refusals(s), "1: push of chunk 0 from worker 1 at step 0: the update would make"));
    // Nothing was recorded: the worker's next push of that step, a sane one, is applied.
    CHECK(s->push(1, 0, 0, constant(0.0f), 1.0).applied);
    CHECK(s->version(0) == 1);
  }
}

TEST_CASE("async: an update that would make the optimizer state non-finite is refused, though the weight stays finite") {
  SUBCASE("adam: the second moment of a huge gradient overflows") {
    Store s(Mode::kAsync, 1, 0.01, "adam");
    const std::string why = thrown_text<RequestError>([&] { s->push(0, 0, 0, constant(1e30f), 0.01); });
    CHECK(has(why, "the update would make 6 weights or optimizer values non-finite"));
    CHECK(has(why, "first at element 0: weight 1 -> "));  // the weight itself would have stayed finite
    CHECK(s.weights() == constant(1.0f));
    CHECK(s->save_chunk(0).optimizer_state == std::vector<float>(2 * kElems, 0.0f));
    CHECK(s->save_chunk(0).optimizer_steps == 0);
  }
  SUBCASE("sgd with momentum and rate 0: the velocity overflows") {
    Store s(Mode::kAsync, 1, 0.01, "sgd", 0.9);
    CHECK(s->push(0, 0, 0, constant(kMax), 0.0).applied);  // velocity = max, weights unchanged (rate 0)
    CHECK_THROWS_AS(s->push(0, 0, 1, constant(kMax), 0.0), RequestError);  // 0.9 max + max = inf
    CHECK(s->save_chunk(0).optimizer_state == constant(kMax));
    CHECK(s->save_chunk(0).optimizer_steps == 1);
  }
}

TEST_CASE("sync: finite gradients whose sum overflows: the step is refused, naming its contributors, and completes") {
  // 2 workers in rank order (the second push's pass adds it to the first), in reverse (the
  // early one is the partial sum), 3 workers in reverse (two early: the sum is made
  // first, then applied: the apply path), and one worker that skips.
  struct Case {
    const char* name;
    int workers;
    std::vector<int> order;
    int skipper;
  };
  for (const Case& k : {Case{"2 in rank order", 2, {0, 1}, -1}, Case{"2 reversed", 2, {1, 0}, -1},
                        Case{"3 reversed", 3, {2, 1, 0}, -1}, Case{"3, one skips", 3, {0, 2, 1}, 2}}) {
    CAPTURE(k.name);
    Store s(Mode::kSync, k.workers, 0.05);
    for (const int w : k.order) {
      const PushOutcome out =
          w == k.skipper ? s->skip(w, 0, 0) : s->push(w, 0, 0, constant(kMax), 0.05);  // each finite
      CHECK(out.applied == (w == k.order.back()));  // the last completes the step: its version advances
    }
    CHECK(s->version(0) == 1);
    CHECK(s.weights() == constant(1.0f));  // as they were
    CHECK(s->stats().refused_steps == 1);
    CHECK(s->stats().updates_applied == 0);
    CHECK(s->stats().pushes_rejected == 0);  // no push is refused: the step is
    const std::string noted = refusals(s);
    const std::string names = k.skipper >= 0 ? "worker(s) 0, 1 would" : k.workers == 3 ? "worker(s) 0, 1, 2 would" : "worker(s) 0, 1 would";
    CHECK(has(noted, "step 0 of chunk 0: the update of the summed gradients of " + names));
    CHECK(has(noted, "step refused: the weights are unchanged"));
    for (int w = 0; w < k.workers; ++w) {
      CAPTURE(w);
      CHECK(s->stats().refused_by_worker.count(w) == (w == k.skipper ? 0u : 1u));
    }
    // The next step is an ordinary one.
    for (int w = 0; w < k.workers; ++w) s->push(w, 0, 1, constant(1.0f), 0.05);
    CHECK(s->version(0) == 2);
    CHECK(s.weights() == constant(1.0f - 0.05f));
    CHECK(s->stats().updates_applied == 1);
  }
}

TEST_CASE("sync: a lone contributor whose update overflows refuses the step all the same") {
  Store s(Mode::kSync, 1, 10.0, "sgd", 0.0, kMax / 2);
  CHECK(s->push(0, 0, 0, constant(-kMax / 2), 10.0).applied);
  CHECK(s->version(0) == 1);
  CHECK(s.weights() == constant(kMax / 2));
  CHECK(has(refusals(s), "0: step 0 of chunk 0: the update of the summed gradients of worker(s) 0 would make 6"));
}
