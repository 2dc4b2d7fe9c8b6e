// The failure and staleness logic under faults only the fake transport
// (common/transport/fake/fake_transport.h) makes deterministic: a whole cluster (scheduler,
// servers, workers as threads) over one FakeTransport with a fault plan.
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <vector>

#include "common/base/errors.h"
#include "tests/cluster/run_workers.h"
#include "tools/cluster/local_cluster.h"

using namespace pstrain;
using pstrain::test::run_workers;
using std::chrono::milliseconds;

namespace {

ParamLayout small_layout() {
  ParamLayout l;
  l.add("a", {16});
  return l;
}

LocalClusterOptions fake_options(Mode mode, int workers, int bound = 0) {
  LocalClusterOptions o;
  o.transport = "fake";
  o.mode = mode;
  o.staleness_bound = bound;
  o.num_servers = 1;
  o.num_workers = workers;
  o.optimizer.name = "sgd";
  o.optimizer.momentum = 0.0;
  o.optimizer.weight_decay = 0.0;
  o.cluster.timeout_ms = 20000;
  o.cluster.heartbeat_interval_ms = 100;
  return o;
}

}  // namespace

TEST_CASE("fake: ssp with the slow worker's pushes delayed, the fast worker is held exactly from the step past the bound") {
  constexpr int kBound = 2;
  constexpr int kSteps = 6;
  LocalCluster cluster(fake_options(Mode::kSsp, 2, kBound));
  FakeFault slow;
  slow.action = FakeFault::Action::kDelay;
  slow.type = MsgType::kPush;
  slow.sender_role = Role::kWorker;
  slow.sender = 1;
  slow.delay = milliseconds(300);
  cluster.fake()->add_fault(slow);
  const ParamLayout l = small_layout();
  std::vector<std::int64_t> parked(kSteps, -1);  // worker 0's pulls: us held at the server, per step
  run_workers(2, [&](int r) {
    WorkerSession session(cluster.transport(), cluster.worker_options(r), l);
    std::vector<float> params(16, 0.0f);
    session.broadcast_initial(params);
    std::vector<float> grad(16, 1.0f);
    for (int step = 0; step < kSteps; ++step) {
      const TicketResult got = session.kv().wait(session.kv().pull(params, step));
      if (r == 0) parked[static_cast<std::size_t>(step)] = got.max_parked_us;
      session.kv().wait(session.kv().push(grad, step, 0.5));
    }
    session.finish();
  });
  cluster.join();
  // Steps 0..bound need nothing of worker 1 (its clock >= step - bound <= 0): answered at once.
  for (int step = 0; step <= kBound; ++step) CHECK(parked[static_cast<std::size_t>(step)] == 0);
  // Step bound+1 needs worker 1's first push, 300 ms late: held for most of that.
  CHECK(parked[kBound + 1] > 100000);
}

TEST_CASE("fake: a push reply that never comes makes the KV client time out, naming what is missing (no resend)") {
  LocalClusterOptions o = fake_options(Mode::kAsync, 1);
  o.cluster.timeout_ms = 1500;
  LocalCluster cluster(o);
  FakeFault drop;
  drop.type = MsgType::kPushReply;
  drop.nth = 1;
  const std::size_t rule = cluster.fake()->add_fault(drop);
  const ParamLayout l = small_layout();
  run_workers(1, [&](int r) {
    WorkerSession session(cluster.transport(), cluster.worker_options(r), l);
    std::vector<float> params(16, 1.0f);
    session.broadcast_initial(params);
    std::vector<float> grad(16, 2.0f);
    const auto start = std::chrono::steady_clock::now();
    CHECK_THROWS_WITH_AS(session.kv().wait(session.kv().push(grad, 0, 0.5)),
                         "worker 0: 1 replies from the servers still missing after 1500 ms", TimeoutError);
    CHECK(std::chrono::steady_clock::now() - start >= milliseconds(1400));  // the whole timeout (to the ms it rounds to)
    // The push itself was applied once (only its reply was lost): the next pull sees it.
    session.kv().wait(session.kv().pull(params, 1));
    for (float x : params) CHECK(x == 0.0f);
    session.finish();
  });
  cluster.join();
  CHECK(cluster.fake()->acted(rule) == 1);
}

// The policy (server/shard_store.h, idempotence): a push of a step below the
// worker's clock of the chunk counts as a resend of one already taken: it is
// acknowledged and not applied. So a swapped pair loses step 0's gradient,
// without an error at the worker. ZeroMQ links never reorder; a transport
// that could would need sequence numbers before this policy is safe.
TEST_CASE("fake: a push pair arriving swapped (step 1 before step 0): step 1 applies, step 0 is acknowledged as a resend and not applied") {
  LocalCluster cluster(fake_options(Mode::kAsync, 1));
  FakeFault hold;
  hold.action = FakeFault::Action::kHold;
  hold.type = MsgType::kPush;
  hold.step = 0;
  const std::size_t rule = cluster.fake()->add_fault(hold);
  const ParamLayout l = small_layout();
  run_workers(1, [&](int r) {
    WorkerSession session(cluster.transport(), cluster.worker_options(r), l);
    std::vector<float> params(16, 1.0f);
    session.broadcast_initial(params);
    std::vector<float> grad0(16, 2.0f), grad1(16, 4.0f);
    const KVClient::Ticket first = session.kv().push(grad0, 0, 0.5);
    const KVClient::Ticket second = session.kv().push(grad1, 1, 0.5);
    CHECK_NOTHROW(session.kv().wait(first));
    CHECK_NOTHROW(session.kv().wait(second));
    session.kv().wait(session.kv().pull(params, 2));
    for (float x : params) CHECK(x == 1.0f - 0.5f * 4.0f);  // step 1's gradient only
    session.finish();
  });
  cluster.join();
  CHECK(cluster.fake()->acted(rule) == 1);
}

TEST_CASE("fake: a worker whose connection vanishes mid-request leaves the server serving the others") {
  LocalCluster cluster(fake_options(Mode::kAsync, 2));
  FakeFault gone;
  gone.action = FakeFault::Action::kDisconnect;
  gone.type = MsgType::kPull;
  gone.sender_role = Role::kWorker;
  gone.sender = 1;
  gone.step = 7;
  const std::size_t rule = cluster.fake()->add_fault(gone);
  const ParamLayout l = small_layout();
  std::vector<float> final0;
  run_workers(2, [&](int r) {
    WorkerSession session(cluster.transport(), cluster.worker_options(r), l);
    std::vector<float> params(16, 1.0f);
    session.broadcast_initial(params);
    if (r == 1) {
      // The pull reaches the server, then its connection is gone: the reply finds nobody.
      session.kv().pull(params, 7);
      session.scheduler().barrier("worker 1 gone");
      session.finish();
      return;
    }
    session.scheduler().barrier("worker 1 gone");
    std::vector<float> grad(16, 1.0f);
    for (int step = 0; step < 4; ++step) {
      session.kv().wait(session.kv().pull(params, step));
      session.kv().wait(session.kv().push(grad, step, 0.25));
    }
    session.kv().wait(session.kv().pull(params, 4));
    final0 = params;
    session.finish();
  });
  CHECK_NOTHROW(cluster.join());
  CHECK(cluster.fake()->acted(rule) == 1);
  CHECK(final0 == std::vector<float>(16, 1.0f - 4 * 0.25f));
}
