// cluster.on_worker_failure = "restart", below the launcher: the consistency
// policies re-admit a dropped worker at the step the job is at (no step waits
// on its past, nothing is counted twice, the ssp bound holds), and the
// scheduler accepts a --rejoin registration only for a dropped rank,
// refusing the rest with the reason; in-process, a lost worker's rank is
// taken back by a new session and the job ends with the exact weights the
// rule predicts.
#include <doctest/doctest.h>

#include <atomic>
#include <functional>
#include <optional>
#include <string_view>
#include <thread>

#include "common/base/errors.h"
#include "server/shard_store.h"
#include "tests/cluster/run_workers.h"
#include "tools/cluster/local_cluster.h"
#include "worker/train/ps_rejoin.h"
#include "common/transport/zmq/zmq_transport.h"
#include "tests/support/throw_text.h"
#include "tests/support/wait.h"

using namespace pstrain;

namespace {

struct Fixture {
  ParamLayout layout;
  ShardMap map;
  OptimizerConfig sgd;
  Fixture() {
    layout.add("w", {4});
    map = ShardMap(layout, 1, 1 << 20);
    sgd.name = "sgd";
    sgd.momentum = 0.0;
    sgd.weight_decay = 0.0;
  }
  StoreOptions options(Mode mode, int bound = 0) const {
    StoreOptions o;
    o.consistency = ConsistencyOptions{mode, bound};
    o.optimizer = sgd;
    return o;
  }
};

std::vector<float> g(float v) { return std::vector<float>(4, v); }

using pstrain::test::thrown_text;  // tests/support/throw_text.h

}  // namespace

// A push of a step below the worker's clock (already pushed, or before its
// rejoin) is acknowledged and not applied (server/shard_store.h: duplicates
// are idempotent): counted as a duplicate, the weights untouched.
template <typename Push>
bool acknowledged_not_applied(ShardStore& store, Push push) {
  const std::int64_t before = store.stats().duplicate_pushes;
  const std::vector<float> weights = store.snapshot(0, 0).values();
  const PushOutcome out = push();
  return !out.applied && store.stats().duplicate_pushes == before + 1 && store.snapshot(0, 0).values() == weights;
}

TEST_CASE("sync rejoin: the step not yet pushed by anyone waits for the rejoiner, none before it") {
  Fixture f;
  ShardStore store(f.map, 0, 3, f.options(Mode::kSync));
  store.init(0, g(10.0f));
  store.drop_worker(1);
  // Step 0 without worker 1: mean of 2 and 4, lr 1.
  store.push(0, 0, 0, g(2.0f), 1.0);
  CHECK(store.push(2, 0, 0, g(4.0f), 1.0).applied);
  CHECK(store.version(0) == 1);
  CHECK(store.rejoin_worker(1) == std::vector<std::int64_t>{1});  // the step the job is at
  CHECK(store.next_step(1, 0) == 1);
  // Its past steps are not waited for and cannot be pushed.
  CHECK(acknowledged_not_applied(store, [&] { return store.push(1, 0, 0, g(9.0f), 1.0); }));
  // Step 1 now needs all three.
  CHECK_FALSE(store.push(0, 0, 1, g(2.0f), 1.0).applied);
  CHECK_FALSE(store.push(2, 0, 1, g(4.0f), 1.0).applied);
  CHECK_FALSE(store.ready(0, 0, 2));
  CHECK(store.push(1, 0, 1, g(3.0f), 1.0).applied);
  CHECK(store.snapshot(0, 0).values() == g(10.0f - 3.0f - 3.0f));  // (2+4)/2, then (2+3+4)/3
  CHECK(acknowledged_not_applied(store, [&] { return store.push(1, 0, 1, g(3.0f), 1.0); }));  // never twice
}

TEST_CASE("sync rejoin: a step some worker already pushed does not wait for the rejoiner") {
  Fixture f;
  ShardStore store(f.map, 0, 3, f.options(Mode::kSync));
  store.init(0, g(10.0f));
  store.drop_worker(1);
  store.push(2, 0, 0, g(4.0f), 1.0);  // rank 2 is in, rank 0 not yet: rank 1's turn in the sum has passed
  CHECK(store.rejoin_worker(1) == std::vector<std::int64_t>{1});
  CHECK(store.push(0, 0, 0, g(2.0f), 1.0).applied);  // step 0 completes with 0 and 2 only
  CHECK(store.snapshot(0, 0).values() == g(7.0f));
  CHECK_FALSE(store.push(0, 0, 1, g(2.0f), 1.0).applied);  // step 1 waits for it
  CHECK_FALSE(store.push(2, 0, 1, g(4.0f), 1.0).applied);
  CHECK(store.push(1, 0, 1, g(6.0f), 1.0).applied);
  CHECK(store.snapshot(0, 0).values() == g(3.0f));  // 7 - (2+6+4)/3
}

TEST_CASE("sync rejoin: a push the dropped process made before it died counts once, and the rejoiner starts after it") {
  Fixture f;
  ShardStore store(f.map, 0, 2, f.options(Mode::kSync));
  store.init(0, g(10.0f));
  CHECK_FALSE(store.push(1, 0, 0, g(6.0f), 1.0).applied);  // then worker 1 dies
  store.drop_worker(1);
  CHECK(store.rejoin_worker(1) == std::vector<std::int64_t>{1});
  CHECK(acknowledged_not_applied(store, [&] { return store.push(1, 0, 0, g(6.0f), 1.0); }));
  CHECK(store.push(0, 0, 0, g(2.0f), 1.0).applied);
  CHECK(store.snapshot(0, 0).values() == g(6.0f));  // 10 - (2+6)/2: its push counted once
  CHECK(store.stats().updates_applied == 1);
}

TEST_CASE("sync rejoin: a skip push at the step before the join completes that step without a gradient") {
  Fixture f;
  ShardStore store(f.map, 0, 2, f.options(Mode::kSync));
  store.init(0, g(10.0f));
  store.drop_worker(1);
  CHECK(store.rejoin_worker(1) == std::vector<std::int64_t>{0});
  CHECK_FALSE(store.push(0, 0, 0, g(2.0f), 1.0).applied);
  CHECK(store.skip(1, 0, 0).applied);  // what rejoin_ps_job sends for a chunk a step behind
  CHECK(store.snapshot(0, 0).values() == g(8.0f));
}

TEST_CASE("async and ssp rejoin: the rejoiner's clock starts at the slowest live clock, never below its own") {
  Fixture f;
  for (Mode mode : {Mode::kAsync, Mode::kSsp}) {
    CAPTURE(to_string(mode));
    ShardStore store(f.map, 0, 3, f.options(mode, 1));
    store.init(0, g(0.0f));
    for (int s = 0; s < 3; ++s) store.push(1, 0, s, g(1.0f), 1.0);  // worker 1: clock 3, then dies
    store.drop_worker(1);
    for (int s = 0; s < 2; ++s) store.push(0, 0, s, g(1.0f), 1.0);  // clock 2
    for (int s = 0; s < 5; ++s) {
      if (mode == Mode::kSsp && !store.ready(0, 2, s)) break;
      store.push(2, 0, s, g(1.0f), 1.0);
    }
    CHECK(store.rejoin_worker(1) == std::vector<std::int64_t>{3});  // max(slowest 2, its own 3)
    CHECK(acknowledged_not_applied(store, [&] { return store.push(1, 0, 2, g(1.0f), 1.0); }));
    if (mode == Mode::kSsp) {
      // The bound is unchanged by the rejoin: worker 0 (clock 2) is still the slowest.
      CHECK(store.ready(0, 1, 3));
      CHECK_FALSE(store.ready(0, 1, 4));
    }
    CHECK(store.push(1, 0, 3, g(1.0f), 1.0).applied);
  }
  ShardStore fresh(f.map, 0, 2, f.options(Mode::kAsync));
  fresh.init(0, g(0.0f));
  CHECK(thrown_text([&] { fresh.rejoin_worker(1); }).find("never dropped") != std::string::npos);
}

namespace {

LocalClusterOptions cluster_options(WorkerFailurePolicy policy) {
  LocalClusterOptions o;
  o.mode = Mode::kSync;
  o.num_servers = 2;
  o.num_workers = 3;
  o.optimizer.momentum = 0.0;
  o.partition_bytes = 64;  // several chunks on each server
  o.cluster.timeout_ms = 10000;
  o.cluster.heartbeat_interval_ms = 50;
  o.cluster.heartbeat_timeout_ms = 500;
  o.cluster.on_worker_failure = policy;
  o.cluster.max_restarts = 2;
  o.log_level = LogLevel::kError;
  return o;
}

ParamLayout layout() {
  ParamLayout l;
  l.add("w", {40});
  return l;
}

// The scheduler's refusal of a rejoin: its text ("" if accepted) and status.
struct Refusal {
  std::string text;
  Status status = Status::kOk;
  bool retryable = false;
  std::string_view::size_type find(std::string_view part) const { return text.find(part); }
};

// A rejoin registration sent by hand; returns the scheduler's refusal.
Refusal rejoin_refusal(zmq::context_t& ctx, const LocalCluster& cluster, int rank) {
  const WorkerSessionOptions o = cluster.worker_options(rank);
  SchedulerClient client(std::make_unique<ZmqTransport>(ctx), o.scheduler_endpoint, Role::kWorker, o.cluster, nullptr,
                         o.security);  // the job's secret: the refusal is the rejoin rule's
  RegisterRequest req;
  req.requested_rank = rank;
  req.host = "test";
  req.job_fingerprint = o.job_fingerprint;
  req.layout = layout();
  try {
    client.rejoin_node(req);
  } catch (const SchedulerRefusal& e) {
    return Refusal{e.what(), e.status(), e.retryable()};
  }
  return {};
}

}  // namespace

TEST_CASE("restart, sync: a lost worker's rank is taken back at the job's step; each step is the mean of those in it") {
  LocalCluster cluster(cluster_options(WorkerFailurePolicy::kRestart));
  zmq::context_t& ctx = cluster.zmq_context();  // inproc peers share the cluster's
  constexpr int kSteps = 30;
  std::vector<float> final0;
  std::int64_t joined_at = -1;
  std::atomic<bool> joined{false};
  Refusal alive_refusal, range_refusal;
  test::run_workers(3, [&](int r) {
    std::vector<float> params(40, 10.0f);
    std::vector<float> grad(40, static_cast<float>(r + 1));
    std::int64_t first = 0;
    std::optional<WorkerSession> session;
    session.emplace(std::make_unique<ZmqTransport>(ctx), cluster.worker_options(r), layout());
    session->broadcast_initial(params);
    if (r == 2) {
      // Lost at once: no push, and no heartbeat from here on.
      session.reset();
      WorkerSessionOptions again = cluster.worker_options(2);
      again.rejoin = true;  // refused while worker 2 is alive, then accepted once dropped
      session.emplace(std::make_unique<ZmqTransport>(ctx), again, layout());
      Logger log("rejoiner", LogLevel::kError);
      first = rejoin_ps_job(*session, params, again.cluster, log);
      joined_at = first;
      joined = true;
    }
    if (r == 1) {
      alive_refusal = rejoin_refusal(ctx, cluster, 0);
      range_refusal = rejoin_refusal(ctx, cluster, 7);
    }
    for (std::int64_t step = first; step < kSteps; ++step) {
      if (r != 2 && step == kSteps / 3) {  // so the rejoin lands mid-run: the others wait for it here
        CHECK(test::wait_until([&] { return joined.load(); }, std::chrono::seconds(30), "worker 2's rejoin"));
      }
      session->kv().wait(session->kv().pull(params, step));
      session->kv().wait(session->kv().push(grad, step, 0.5));
    }
    session->scheduler().barrier("all pushed");
    session->kv().wait(session->kv().pull(params, kSteps));
    if (r == 0) final0 = params;
    session->finish();
  });
  CHECK_NOTHROW(cluster.join());
  CHECK(alive_refusal.find("is alive") != std::string::npos);
  CHECK(alive_refusal.status == Status::kRetryLater);  // not yet: until the scheduler has dropped it
  CHECK(alive_refusal.retryable);
  CHECK(range_refusal.find("has no worker rank 7") != std::string::npos);
  CHECK(range_refusal.status == Status::kRefused);  // never
  CHECK_FALSE(range_refusal.retryable);
  REQUIRE(joined_at > 0);
  REQUIRE(joined_at < kSteps);
  // Steps before the join: mean of 1 and 2; from it on: mean of 1, 2 and 3 (lr 0.5).
  const auto j = static_cast<float>(joined_at);
  const float expected = 10.0f - 0.5f * (1.5f * j + 2.0f * (static_cast<float>(kSteps) - j));
  CHECK(final0[0] == doctest::Approx(expected).epsilon(1e-5));
}

TEST_CASE("a rejoin under on_worker_failure = \"continue\" is refused with the reason") {
  LocalClusterOptions o = cluster_options(WorkerFailurePolicy::kContinue);
  o.num_workers = 1;
  LocalCluster cluster(o);
  zmq::context_t& ctx = cluster.zmq_context();  // inproc peers share the cluster's
  WorkerSession session(std::make_unique<ZmqTransport>(ctx), cluster.worker_options(0), layout());
  std::vector<float> params(40, 1.0f);
  session.broadcast_initial(params);
  const Refusal refusal = rejoin_refusal(ctx, cluster, 0);
  CHECK(refusal.find("not \"restart\"") != std::string::npos);
  CHECK(refusal.status == Status::kRefused);
  session.finish();
  CHECK_NOTHROW(cluster.join());
}
