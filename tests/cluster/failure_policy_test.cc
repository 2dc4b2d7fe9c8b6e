// The failure policy for workers (cluster.on_worker_failure = "continue"),
// in-process: a worker that stops heartbeating is dropped, the servers'
// consistency policies stop waiting for it, and the others finish the job.
#include <doctest/doctest.h>

#include <unistd.h>

#include <mutex>
#include <thread>

#include "common/base/errors.h"
#include "common/transport/transport.h"
#include "tests/cluster/run_workers.h"
#include "tools/cluster/local_cluster.h"
#include "common/transport/zmq/zmq_transport.h"

using namespace pstrain;

namespace {

LocalClusterOptions options(Mode mode, int workers, WorkerFailurePolicy policy) {
  LocalClusterOptions o;
  o.mode = mode;
  o.staleness_bound = 1;
  o.num_servers = 2;
  o.num_workers = workers;
  o.optimizer.momentum = 0.0;
  o.partition_bytes = 64;  // several chunks on each server
  o.cluster.timeout_ms = 10000;
  o.cluster.heartbeat_interval_ms = 50;
  o.cluster.heartbeat_timeout_ms = 500;
  o.cluster.on_worker_failure = policy;
  o.log_level = LogLevel::kError;
  return o;
}

ParamLayout layout() {
  ParamLayout l;
  l.add("w", {40});
  return l;
}

// Workers 0..W-2 train `steps` steps; worker W-1 takes the initial weights
// and leaves without a word (its heartbeats stop). Returns worker 0's final weights.
std::vector<float> run_with_a_worker_lost(LocalCluster& cluster, zmq::context_t& ctx, int workers, int steps,
                                          Mode mode) {
  std::vector<float> final0;
  test::run_workers(workers, [&](int r) {
    WorkerSession session(std::make_unique<ZmqTransport>(ctx), cluster.worker_options(r), layout());
    std::vector<float> params(40, 10.0f);
    session.broadcast_initial(params);
    if (r == workers - 1) return;  // lost: no push, no heartbeat from here on
    std::vector<float> grad(40, static_cast<float>(r + 1));
    for (int step = 0; step < steps; ++step) {
      session.kv().wait(session.kv().pull(params, step));
      session.kv().wait(session.kv().push(grad, step, 0.5));
    }
    session.scheduler().barrier("all pushed");
    session.kv().wait(session.kv().pull(params, mode == Mode::kSync ? steps : 0));
    if (r == 0) final0 = params;
    session.finish();
  });
  return final0;
}

}  // namespace

// What the scheduler reported through SchedulerOptions::on_failure (from its thread).
struct Failures {
  std::mutex mutex;
  std::vector<NodeFailure> seen;
  std::function<void(const NodeFailure&)> sink() {
    return [this](const NodeFailure& f) {
      std::lock_guard<std::mutex> lock(mutex);
      seen.push_back(f);
    };
  }
};

TEST_CASE("continue, sync: a lost worker is dropped and every step is the mean of those left") {
  Failures failures;
  LocalClusterOptions o = options(Mode::kSync, 3, WorkerFailurePolicy::kContinue);
  o.on_failure = failures.sink();
  LocalCluster cluster(o);
  zmq::context_t& ctx = cluster.zmq_context();  // inproc peers share the cluster's
  const std::vector<float> w = run_with_a_worker_lost(cluster, ctx, 3, 4, Mode::kSync);
  CHECK_NOTHROW(cluster.join());
  // Worker 2 never pushed: each of the 4 updates is the mean of 1 and 2 at lr 0.5.
  CHECK(w == std::vector<float>(40, 10.0f - 4 * 0.5f * 1.5f));
  // The drop was reported once, as a silence, with what the launcher needs to fence the process.
  REQUIRE(failures.seen.size() == 1);
  const NodeFailure& f = failures.seen[0];
  CHECK(f.role == Role::kWorker);
  CHECK(f.rank == 2);
  CHECK(f.pid == getpid());  // in-process: every node registered this process
  CHECK(f.silent);
  CHECK(f.policy == "continue");
  CHECK(f.time_s - f.last_seen_s >= 0.5);  // heartbeat_timeout_ms
  CHECK(f.last_seen_s > 0);
  CHECK(doctest::String(f.reason.c_str()) == doctest::Contains("sent no heartbeat"));
  const std::string line = to_json_line(f);
  CHECK(line.find("\"role\":\"worker\",\"rank\":2,\"pid\":" + std::to_string(getpid())) == 1);
  CHECK(line.find("\"silent\":true") != std::string::npos);
}

TEST_CASE("continue, ssp: the others are no longer held back by a lost worker's clock") {
  LocalCluster cluster(options(Mode::kSsp, 3, WorkerFailurePolicy::kContinue));
  zmq::context_t& ctx = cluster.zmq_context();  // inproc peers share the cluster's
  const std::vector<float> w = run_with_a_worker_lost(cluster, ctx, 3, 5, Mode::kSsp);
  CHECK_NOTHROW(cluster.join());
  // Every push of workers 0 and 1 applied once: 5 x (1 + 2) x 0.5.
  CHECK(w == std::vector<float>(40, 10.0f - 5 * 0.5f * 3.0f));
}

TEST_CASE("abort: a lost worker ends the job, naming it") {
  Failures failures;
  LocalClusterOptions o = options(Mode::kSync, 2, WorkerFailurePolicy::kAbort);
  o.on_failure = failures.sink();
  LocalCluster cluster(o);
  zmq::context_t& ctx = cluster.zmq_context();  // inproc peers share the cluster's
  CHECK_THROWS_WITH_AS(run_with_a_worker_lost(cluster, ctx, 2, 3, Mode::kSync), doctest::Contains("worker 1"),
                       AbortedError);
  CHECK_THROWS_WITH_AS(cluster.join(), doctest::Contains("sent no heartbeat"), AbortedError);
  CHECK(failures.seen.empty());  // the job ended: nothing goes on without it, nothing to fence
}

TEST_CASE("a worker waiting for the servers stops at the scheduler's shutdown instead of waiting on") {
  LocalClusterOptions o = options(Mode::kSync, 1, WorkerFailurePolicy::kAbort);
  o.cluster.timeout_ms = 20000;
  LocalCluster cluster(o);
  zmq::context_t& ctx = cluster.zmq_context();  // inproc peers share the cluster's
  WorkerSession session(std::make_unique<ZmqTransport>(ctx), cluster.worker_options(0), layout());
  std::vector<float> params(40, 1.0f);
  session.broadcast_initial(params);
  const KVClient::Ticket never = session.kv().pull(params, 5);  // a version that never comes
  // "done" on the worker's own scheduler connection: every worker is done, so the job shuts down.
  Header done;
  done.type = MsgType::kDone;
  done.role = Role::kWorker;
  done.sender = session.rank();
  session.scheduler().connection().send(done);
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(session.kv().wait(never), doctest::Contains("the scheduler shut the job down"), AbortedError);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));  // not the 20 s timeout
  CHECK_NOTHROW(cluster.join());
}
