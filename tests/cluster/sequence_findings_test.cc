// Regression tests for what the structure-aware fuzz harness
// (fuzz/cluster_sequence.cc) found in the scheduler, over real tcp sockets.
#include <doctest/doctest.h>

#include <thread>

#include "common/base/errors.h"
#include "common/config/job_fingerprint.h"
#include "common/transport/transport.h"
#include "common/wire/wire_archive.h"
#include "tools/cluster/local_cluster.h"
#include "common/transport/zmq/zmq_transport.h"
#include "common/transport/zmq/zmq_socket.h"
#include "tests/support/wait.h"
#include "tests/support/stderr_capture.h"

using namespace pstrain;
using std::chrono::milliseconds;

namespace {

LocalClusterOptions two_workers(WorkerFailurePolicy on_worker_failure) {
  LocalClusterOptions o;
  o.num_servers = 1;
  o.num_workers = 2;
  o.optimizer.momentum = 0.0;
  o.transport = "tcp";
  o.cluster.timeout_ms = 10000;
  o.cluster.heartbeat_interval_ms = 50;
  o.cluster.heartbeat_timeout_ms = 1000;
  o.cluster.on_worker_failure = on_worker_failure;
  o.log_level = LogLevel::kError;
  o.open_registration = true;  // the peers here register by hand, without the job secret's challenge
  return o;
}

ParamLayout layout_of(std::int64_t n) {
  ParamLayout layout;
  layout.add("w", {n});
  return layout;
}

RegisterRequest worker_request(int rank, const ParamLayout& layout) {
  RegisterRequest req;
  req.role = Role::kWorker;
  req.requested_rank = rank;
  req.host = "peer";
  req.job_fingerprint = job_fingerprint(Mode::kSync, std::int64_t{1} << 20, 1, 2);
  req.layout = layout;
  return req;
}

Header register_header() {
  Header h;
  h.type = MsgType::kRegister;
  h.role = Role::kWorker;
  return h;
}

}  // namespace

TEST_CASE("a worker that registers and leaves before the rendezvous does not stop the scheduler") {
  LocalCluster cluster(two_workers(WorkerFailurePolicy::kContinue));
  zmq::context_t& ctx = cluster.zmq_context();  // inproc peers share the cluster's
  {
    zmq::socket_t s = make_socket(ctx, zmq::socket_type::dealer, SocketOptions{std::int64_t{1} << 20, milliseconds(0)});
    connect_socket(s, cluster.scheduler_endpoint());
    send_message(s, nullptr, register_header(), Payload::bytes(wire_encode(worker_request(1, layout_of(16)))));
    // Its registration is taken (a refused one would get an error reply first).
    s.set(zmq::sockopt::linger, 100);
  }
  std::this_thread::sleep_for(milliseconds(300));  // it has gone when the rendezvous replies to it
  // The real worker 0 completes the rendezvous: the reply to the vanished
  // peer is dropped, worker 0 gets its own, and (silent, the vanished one is
  // dropped by the failure policy) worker 0 trains alone and the job ends.
  WorkerSession session(std::make_unique<ZmqTransport>(ctx), cluster.worker_options(0), layout_of(16));
  CHECK(session.rank() == 0);
  std::vector<float> params(16, 1.0f);
  session.broadcast_initial(params);
  session.finish();
  CHECK_NOTHROW(cluster.join());
}

TEST_CASE("a worker registering with another model layout is refused at once and does not abort the job") {
  pstrain::test::StderrCapture log;  // the scheduler's log, to wait for worker 0's registration
  LocalClusterOptions o = two_workers(WorkerFailurePolicy::kAbort);
  o.log_level = LogLevel::kInfo;
  LocalCluster cluster(o);
  zmq::context_t& ctx = cluster.zmq_context();  // inproc peers share the cluster's
  // Worker 0 registers first (in a thread: its reply comes at the rendezvous).
  std::unique_ptr<WorkerSession> session;
  std::thread first([&] {
    session = std::make_unique<WorkerSession>(std::make_unique<ZmqTransport>(ctx), cluster.worker_options(0), layout_of(16));
  });
  CHECK(pstrain::test::wait_until([&] { return log.has("registered worker from"); }, milliseconds(30000),
                                   "worker 0's registration"));  // CHECK: `first` is joined below
  zmq::socket_t s = make_socket(ctx, zmq::socket_type::dealer, SocketOptions{std::int64_t{1} << 20, milliseconds(0)});
  connect_socket(s, cluster.scheduler_endpoint());
  send_message(s, nullptr, register_header(), Payload::bytes(wire_encode(worker_request(1, layout_of(25)))));
  auto env = receive_message(s, false, milliseconds(3000), DecodeLimits{});
  REQUIRE(env.has_value());
  CHECK(env->message.header.type == MsgType::kError);
  CHECK(env->message.text_payload().find("different model layout") != std::string::npos);
  // The real worker 1 completes the job.
  std::thread second([&] {
    WorkerSession w1(std::make_unique<ZmqTransport>(ctx), cluster.worker_options(1), layout_of(16));
    std::vector<float> params(16, 1.0f);
    w1.broadcast_initial(params);
    w1.finish();
  });
  first.join();
  REQUIRE(session != nullptr);
  std::vector<float> params(16, 1.0f);
  session->broadcast_initial(params);
  session->finish();
  second.join();
  CHECK_NOTHROW(cluster.join());
}
