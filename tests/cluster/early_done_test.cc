// A worker that says `done` while another waits at a barrier (issue 27, item
// 1), over real tcp sockets in one process: a scheduler and a server as
// threads, the honest worker 0 a WorkerSession, worker 1 a peer registered
// by hand with the job's credentials (security off: any peer can) that says
// done early. Each barrier kind (the initial weights, a checkpoint, the
// final one) under each failure policy: the wait ends, naming the early done
// and the barrier (abort), or the barrier completes without it (continue,
// restart); a done after the final barrier is the ordinary end.
#include <doctest/doctest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "common/base/errors.h"
#include "common/config/job_fingerprint.h"
#include "common/node/scheduler_client.h"
#include "common/transport/zmq/zmq_transport.h"
#include "common/wire/barrier_names.h"
#include "tests/support/stderr_capture.h"
#include "tests/support/wait.h"
#include "tools/cluster/local_cluster.h"

using namespace pstrain;
using std::chrono::milliseconds;

namespace {

LocalClusterOptions options(WorkerFailurePolicy policy) {
  LocalClusterOptions o;
  o.num_servers = 1;
  o.num_workers = 2;
  o.optimizer.momentum = 0.0;
  o.transport = "tcp";
  o.cluster.timeout_ms = 10000;
  o.cluster.heartbeat_interval_ms = 50;
  o.cluster.heartbeat_timeout_ms = 60000;  // nobody is declared dead for silence here
  o.cluster.on_worker_failure = policy;
  o.log_level = LogLevel::kDebug;  // the scheduler logs each barrier arrival: the tests wait for it
  return o;
}

ParamLayout layout_of(std::int64_t n) {
  ParamLayout layout;
  layout.add("w", {n});
  return layout;
}

// Worker 1, registered by hand: its own connection and token, the job's fingerprint.
struct Peer {
  SchedulerClient client;
  explicit Peer(LocalCluster& cluster)
      : client(std::make_unique<ZmqTransport>(cluster.zmq_context()), cluster.scheduler_endpoint(), Role::kWorker,
               cluster.worker_options(1).cluster, nullptr, cluster.worker_options(1).security) {  // the job's secret
    RegisterRequest req;
    req.requested_rank = 1;
    req.host = "early-done peer";
    req.job_fingerprint = job_fingerprint(Mode::kSync, std::int64_t{1} << 20, 1, 2);
    req.layout = layout_of(16);
    REQUIRE(client.register_node(req).rank == 1);
  }
  // Says done and does not wait for the end.
  void done() {
    Header h;
    h.type = MsgType::kDone;
    h.role = Role::kWorker;
    h.sender = 1;
    client.connection().send(h);
  }
};

// Worker 0: registers, then takes `barriers` in order (the initial weights
// through broadcast_initial); returns "" when all were released, else the error.
std::string honest_worker(LocalCluster& cluster, const std::vector<std::string>& barriers, bool finish) {
  try {
    WorkerSession session(std::make_unique<ZmqTransport>(cluster.zmq_context()), cluster.worker_options(0), layout_of(16));
    std::vector<float> params(16, 1.0f);
    session.broadcast_initial(params);
    for (const std::string& name : barriers) session.scheduler().barrier(name);
    if (finish) session.finish();
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

bool arrived(const pstrain::test::StderrCapture& log, int rank, const std::string& barrier) {
  return log.has("worker " + std::to_string(rank) + " arrived at barrier '" + barrier + "'");
}

}  // namespace

TEST_CASE("abort: a done while worker 0 waits at each kind of barrier ends the job, naming the done and the barrier") {
  // The barriers before the one under test, which worker 1 takes with worker 0.
  const std::vector<std::vector<std::string>> cases{{}, {"checkpoint 2"}, {"checkpoint 2", std::string(kFinalBarrier)}};
  for (const auto& kind : cases) {
    // Worker 1 passes all but the last of them, then says done while worker 0 waits at the last.
    const std::string last = kind.empty() ? "initial weights" : kind.back();
    CAPTURE(last);
    pstrain::test::StderrCapture log;
    LocalCluster cluster(options(WorkerFailurePolicy::kAbort));
    std::string error0;
    std::thread w0([&] { error0 = honest_worker(cluster, kind, true); });
    {
      Peer peer(cluster);
      if (!kind.empty()) peer.client.barrier("initial weights");
      for (std::size_t i = 0; i + 1 < kind.size(); ++i) peer.client.barrier(kind[i]);
      REQUIRE(pstrain::test::wait_until([&] { return arrived(log, 0, last); }, milliseconds(30000),
                                        "worker 0 at barrier '" + last + "'"));
      peer.done();
      w0.join();
    }
    CHECK(error0.find("worker 1 said done before the end of the job") != std::string::npos);
    CHECK(error0.find("at barrier '" + last + "'") != std::string::npos);
    CHECK_THROWS_WITH_AS(cluster.join(), doctest::Contains("worker 1 said done"), AbortedError);
  }
}

TEST_CASE("abort: a done at once after the rendezvous, before worker 0 reaches the initial barrier, ends the job when it does") {
  pstrain::test::StderrCapture log;
  LocalCluster cluster(options(WorkerFailurePolicy::kAbort));
  std::atomic<bool> done_taken{false};
  std::string error0;
  std::thread w0([&] {
    try {
      WorkerSession session(std::make_unique<ZmqTransport>(cluster.zmq_context()), cluster.worker_options(0),
                            layout_of(16));
      pstrain::test::wait_until([&] { return done_taken.load(); }, milliseconds(30000), "worker 1's done");
      std::vector<float> params(16, 1.0f);
      session.broadcast_initial(params);  // reaches the initial barrier after worker 1's done
    } catch (const std::exception& e) {
      error0 = e.what();
    }
  });
  {
    Peer peer(cluster);
    peer.done();
    done_taken.store(pstrain::test::wait_until([&] { return log.has("worker 1 done"); }, milliseconds(30000),
                                               "the scheduler to take worker 1's done"));
    w0.join();  // the job ends as soon as it arrives
  }
  CHECK(done_taken.load());
  CHECK(error0.find("worker 1 said done before the end of the job") != std::string::npos);
  CHECK(error0.find("at barrier 'initial weights'") != std::string::npos);
  CHECK_THROWS_WITH_AS(cluster.join(), doctest::Contains("worker 1 said done"), AbortedError);
}

TEST_CASE("continue and restart: an early done drops the worker, and the barrier completes without it") {
  for (const WorkerFailurePolicy policy : {WorkerFailurePolicy::kContinue, WorkerFailurePolicy::kRestart}) {
    CAPTURE(to_string(policy));
    pstrain::test::StderrCapture log;
    LocalClusterOptions o = options(policy);
    o.cluster.timeout_ms = 2000;  // restart: how long the end waits for a process to take rank 1 back
    LocalCluster cluster(o);
    std::string error0;
    std::vector<float> after;
    std::thread w0([&] {
      try {
        WorkerSession session(std::make_unique<ZmqTransport>(cluster.zmq_context()), cluster.worker_options(0),
                              layout_of(16));
        std::vector<float> params(16, 1.0f);
        session.broadcast_initial(params);
        // Alone in sync mode: the servers no longer wait for the dropped worker's pushes.
        const std::vector<float> grad(16, 1.0f);
        session.kv().wait(session.kv().push(grad, 0, 0.5));
        session.kv().wait(session.kv().pull(params, 1));
        after = params;
        session.scheduler().barrier(std::string(kFinalBarrier));
        session.finish();
      } catch (const std::exception& e) {
        error0 = e.what();
      }
    });
    {
      Peer peer(cluster);
      REQUIRE(pstrain::test::wait_until([&] { return arrived(log, 0, "initial weights"); }, milliseconds(30000),
                                        "worker 0 at the initial barrier"));
      peer.done();
      w0.join();
    }
    CHECK(error0.empty());
    REQUIRE(after.size() == 16);
    CHECK(after[0] < 1.0f);  // worker 0's step was applied without worker 1's push
    CHECK(after == std::vector<float>(16, after[0]));
    CHECK(log.has("worker 1 said done before the end of the job"));
    CHECK(log.has("dropped from the job"));
    CHECK_NOTHROW(cluster.join());
  }
}

TEST_CASE("a done after the final barrier is the ordinary end, and the other worker's done ends the job") {
  pstrain::test::StderrCapture log;
  LocalCluster cluster(options(WorkerFailurePolicy::kAbort));
  std::string error0;
  std::thread w0([&] { error0 = honest_worker(cluster, {std::string(kFinalBarrier)}, true); });
  {
    Peer peer(cluster);
    peer.client.barrier("initial weights");
    peer.client.barrier(std::string(kFinalBarrier));
    peer.done();
    w0.join();
  }
  CHECK(error0.empty());
  CHECK_FALSE(log.has("said done before the end of the job"));
  CHECK_NOTHROW(cluster.join());
}

TEST_CASE("a worker that said done takes no more barriers") {
  LocalCluster cluster(options(WorkerFailurePolicy::kContinue));
  std::atomic<bool> checked{false};
  std::string error0;
  std::thread w0([&] {
    try {
      WorkerSession session(std::make_unique<ZmqTransport>(cluster.zmq_context()), cluster.worker_options(0),
                            layout_of(16));
      std::vector<float> params(16, 1.0f);
      session.broadcast_initial(params);
      pstrain::test::wait_until([&] { return checked.load(); }, milliseconds(30000), "worker 1's refused barrier");
      session.finish();  // after worker 1's barrier was answered: its done then ends the job
    } catch (const std::exception& e) {
      error0 = e.what();
    }
  });
  {
    Peer peer(cluster);
    peer.client.barrier("initial weights");
    peer.done();  // early, but no barrier is open: nobody waits for it
    CHECK_THROWS_WITH_AS(peer.client.barrier("checkpoint 2"), doctest::Contains("takes no more barriers"),
                         SchedulerRefusal);
    checked.store(true);
    w0.join();
  }
  CHECK(error0.empty());
  CHECK_NOTHROW(cluster.join());
}
