// The scheduler's answers about the live workers, in-process: which workers
// share epoch E (the reserved store key of worker/train/epoch_members.h: the
// first ask fixes it, later asks get the same even after a drop, an epoch
// first asked after the drop is the survivors'), and the live set now
// (kLiveWorkersKey: the PS checkpoint's manifest writer is its lowest).
#include <doctest/doctest.h>

#include <mutex>

#include "tests/cluster/run_workers.h"
#include "tools/cluster/local_cluster.h"
#include "worker/train/epoch_members.h"
#include "common/transport/zmq/zmq_transport.h"

using namespace pstrain;

namespace {

// Async, 1 server, 3 workers, "continue", a worker dropped 500 ms after its heartbeats stop.
LocalClusterOptions three_workers_continue() {
  LocalClusterOptions o;
  o.mode = Mode::kAsync;
  o.num_servers = 1;
  o.num_workers = 3;
  o.cluster.timeout_ms = 10000;
  o.cluster.heartbeat_interval_ms = 50;
  o.cluster.heartbeat_timeout_ms = 500;
  o.cluster.on_worker_failure = WorkerFailurePolicy::kContinue;
  o.log_level = LogLevel::kError;
  return o;
}

}  // namespace

TEST_CASE("epoch members: fixed by the first ask; after a drop the next epoch is the survivors'") {
  LocalCluster cluster(three_workers_continue());
  zmq::context_t& ctx = cluster.zmq_context();  // inproc peers share the cluster's
  ParamLayout layout;
  layout.add("w", {8});
  std::mutex mutex;
  std::vector<std::vector<int>> before, again, after;
  test::run_workers(3, [&](int r) {
    WorkerSession session(std::make_unique<ZmqTransport>(ctx), cluster.worker_options(r), layout);
    std::vector<float> params(8, 1.0f);
    session.broadcast_initial(params);
    const auto ask = EpochMembers::from_scheduler(session.scheduler(), 5000);
    const std::vector<int> e0 = ask(0);
    {
      std::lock_guard lock(mutex);
      before.push_back(e0);
    }
    if (r == 2) return;  // lost: its heartbeats stop
    session.scheduler().barrier("after the drop");  // passes once worker 2 is dropped
    const std::vector<int> e0_again = ask(0);
    const std::vector<int> e1 = ask(1);
    {
      std::lock_guard lock(mutex);
      again.push_back(e0_again);
      after.push_back(e1);
    }
    session.finish();
  });
  CHECK_NOTHROW(cluster.join());
  REQUIRE(before.size() == 3);
  for (const auto& m : before) CHECK(m == std::vector<int>{0, 1, 2});
  REQUIRE(after.size() == 2);
  for (const auto& m : again) CHECK(m == std::vector<int>{0, 1, 2});  // fixed by the first ask
  for (const auto& m : after) CHECK(m == std::vector<int>{0, 1});
}

TEST_CASE("live workers: asked now, every time; the lowest is the manifest writer, worker 1 once worker 0 is dropped") {
  LocalCluster cluster(three_workers_continue());
  zmq::context_t& ctx = cluster.zmq_context();  // inproc peers share the cluster's
  ParamLayout layout;
  layout.add("w", {8});
  std::mutex mutex;
  std::vector<int> lowest_before, lowest_after;
  std::vector<std::string> live_after, refusals;
  test::run_workers(3, [&](int r) {
    WorkerSession session(std::make_unique<ZmqTransport>(ctx), cluster.worker_options(r), layout);
    std::vector<float> params(8, 1.0f);
    session.broadcast_initial(params);
    const int first = lowest_live_worker(session.scheduler(), 5000);
    {
      std::lock_guard lock(mutex);
      lowest_before.push_back(first);
    }
    if (r == 0) return;  // lost: its heartbeats stop
    session.scheduler().barrier("after the drop");  // passes once worker 0 is dropped
    const int then = lowest_live_worker(session.scheduler(), 5000);
    const std::string live = session.scheduler().store_get(std::string(kLiveWorkersKey), 5000);
    std::string refused;
    try {
      session.scheduler().store_set(std::string(kLiveWorkersKey), "0,1,2");
    } catch (const std::exception& e) {
      refused = e.what();
    }
    {
      std::lock_guard lock(mutex);
      lowest_after.push_back(then);
      live_after.push_back(live);
      refusals.push_back(refused);
    }
    session.finish();
  });
  CHECK_NOTHROW(cluster.join());
  REQUIRE(lowest_before.size() == 3);
  for (const int l : lowest_before) CHECK(l == 0);
  REQUIRE(lowest_after.size() == 2);
  for (const int l : lowest_after) CHECK(l == 1);
  for (const auto& l : live_after) CHECK(l == "1,2");
  for (const auto& e : refusals) CHECK(e.find("answers itself") != std::string::npos);
}
