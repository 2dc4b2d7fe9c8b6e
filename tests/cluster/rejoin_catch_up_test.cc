// A server that rejoined after a failure restarts from a checkpoint at step
// C while the workers are at S > C: its chunks jump to where the workers'
// requests say the failed server had got, count what was lost, and nothing
// waits for a step that will not come (server/shard_store.h, catch_up).
#include <doctest/doctest.h>

#include "server/shard_store.h"

using namespace pstrain;

namespace {

struct Fixture {
  ParamLayout layout;
  ShardMap map;
  StoreOptions options;
  explicit Fixture(Mode mode) {
    layout.add("w", {4});
    map = ShardMap(layout, 1, 1 << 20);
    options.consistency = ConsistencyOptions{mode, 0};
    options.optimizer.name = "sgd";
    options.optimizer.momentum = 0.0;
    options.optimizer.weight_decay = 0.0;
  }
};

std::vector<float> constant(float v) { return std::vector<float>(4, v); }

}  // namespace

TEST_CASE("sync rejoin: the version jumps to the workers' step, a lost contribution is not waited for") {
  Fixture f(Mode::kSync);
  ShardStore before(f.map, 0, 2, f.options);  // the server that will fail
  before.init(0, constant(0.0f));
  ChunkCheckpoint saved;
  for (std::int64_t step = 0; step < 5; ++step) {
    if (step == 2) saved = before.save_chunk(0);  // the checkpoint at step 2
    before.push(0, 0, step, constant(1.0f), 1.0);
    before.push(1, 0, step, constant(1.0f), 1.0);
  }
  before.push(0, 0, 5, constant(1.0f), 1.0);  // worker 0's step 5 reached it, then it died
  REQUIRE(saved.version == 2);

  ShardStore after(f.map, 0, 2, f.options);
  after.restore_chunk(saved);
  after.begin_catch_up(2);
  // Worker 0 had its push acknowledged and waits for step 6's weights.
  CHECK(after.catch_up(0, 0, 6, true));
  CHECK(after.version(0) == 5);
  CHECK_FALSE(after.ready(0, 0, 6));  // worker 1's step 5 is still to come
  CHECK(after.stats().lost_updates == 3);  // steps 2, 3, 4
  CHECK(after.stats().lost_updates_by_chunk.at(0) == 3);
  CHECK(after.stats().lost_pushes == 1);   // worker 0's step 5
  // Worker 1 resends its step 5: the update is its gradient alone.
  CHECK(after.push(1, 0, 5, constant(2.0f), 1.0).applied);
  CHECK(after.version(0) == 6);
  CHECK(after.ready(0, 0, 6));
  CHECK(after.snapshot(0, 0, 6).values() == std::vector<float>(4, -4.0f));  // -2 at the checkpoint, -2 now
  // Out of catch-up: lockstep again, and a repeat is acknowledged, not applied.
  CHECK_FALSE(after.push(0, 0, 6, constant(1.0f), 1.0).applied);
  CHECK_FALSE(after.push(0, 0, 6, constant(1.0f), 1.0).applied);
  CHECK(after.push(1, 0, 6, constant(1.0f), 1.0).applied);
  CHECK(after.version(0) == 7);
  CHECK(after.stats().duplicate_pushes == 1);
  CHECK(after.stats().rejoined_from_step == 2);
  CHECK_FALSE(after.catch_up(0, 0, 9, false));  // no more jumps
  CHECK(after.stats().lost_updates == 3);
}

TEST_CASE("sync rejoin: a resent push of a step the failed server completed is lost, not applied") {
  Fixture f(Mode::kSync);
  ShardStore after(f.map, 0, 2, f.options);
  after.init(0, constant(0.0f));
  after.begin_catch_up(0);
  CHECK(after.catch_up(1, 0, 4, false));  // worker 1 pushes step 4: steps 0..3 were done
  CHECK(after.version(0) == 4);
  CHECK_FALSE(after.push(0, 0, 3, constant(9.0f), 1.0).applied);  // a resend from before: lost
  CHECK(after.stats().lost_pushes == 1);
  CHECK_FALSE(after.push(1, 0, 4, constant(1.0f), 1.0).applied);
  CHECK(after.push(0, 0, 4, constant(3.0f), 1.0).applied);
  CHECK(after.snapshot(0, 0, 5).values() == constant(-2.0f));
  CHECK(after.stats().lost_updates == 4);
}

TEST_CASE("async and ssp rejoin: each worker's clock jumps to its first request; nothing waits") {
  for (Mode mode : {Mode::kAsync, Mode::kSsp}) {
    CAPTURE(mode);
    Fixture f(mode);
    ShardStore after(f.map, 0, 2, f.options);
    after.init(0, constant(0.0f));
    after.begin_catch_up(3);
    // Restored at clock 0 for both (a fresh init here); worker 0 pushes step 7
    // (the server's catch-up step, then the push).
    CHECK(after.catching_up());
    CHECK(after.catch_up(0, 0, 7, false));
    CHECK(after.push(0, 0, 7, constant(1.0f), 1.0).applied);
    CHECK(after.stats().lost_updates == 7);
    if (mode == Mode::kSsp) CHECK_FALSE(after.ready(0, 0, 8));  // ssp: worker 1 is at clock 0 here
    CHECK(after.catch_up(1, 0, 6, true));  // worker 1 asks for step 6: it had pushed 0..5
    CHECK(after.stats().lost_updates == 13);
    CHECK(after.stats().lost_updates_by_chunk.at(0) == 13);
    if (mode == Mode::kSsp) CHECK_FALSE(after.ready(0, 0, 8));  // bound 0: worker 1 must push 6 and 7
    CHECK(after.ready(0, 1, 6));
    CHECK(after.push(1, 0, 6, constant(1.0f), 1.0).applied);
    CHECK_FALSE(after.catch_up(1, 0, 20, false));  // every worker seen: catch-up is over
    CHECK_FALSE(after.catching_up());
    CHECK_FALSE(after.push(0, 0, 7, constant(1.0f), 1.0).applied);  // a repeat
    CHECK(after.stats().duplicate_pushes == 1);
    CHECK(after.stats().updates_applied == 2);
  }
}
