// Bad requests get error replies and the server keeps serving; a silent
// node, a failing node or a missing node aborts the job with a clear reason.
#include <doctest/doctest.h>

#include <thread>

#include "common/base/errors.h"
#include "common/transport/transport.h"
#include "tools/cluster/local_cluster.h"
#include "common/transport/zmq/zmq_transport.h"
#include "common/transport/zmq/zmq_socket.h"

using namespace pstrain;
using std::chrono::milliseconds;

namespace {

LocalClusterOptions small_options(int workers) {
  LocalClusterOptions o;
  o.num_servers = 1;
  o.num_workers = workers;
  o.optimizer.momentum = 0.0;
  o.cluster.timeout_ms = 5000;
  o.cluster.heartbeat_interval_ms = 50;
  o.cluster.heartbeat_timeout_ms = 600;
  o.log_level = LogLevel::kError;
  return o;
}

ParamLayout layout_of(std::int64_t n) {
  ParamLayout layout;
  layout.add("w", {n});
  return layout;
}

// Sends raw frames to the server and returns the error text it answers with.
std::string error_reply(zmq::socket_t& raw, std::vector<zmq::message_t> frames) {
  for (std::size_t i = 0; i < frames.size(); ++i) {
    raw.send(frames[i], i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
  auto env = receive_message(raw, false, milliseconds(3000), DecodeLimits{});
  REQUIRE(env.has_value());
  CHECK(env->message.header.type == MsgType::kError);
  return env->message.text_payload();
}

std::vector<zmq::message_t> request(Header h, std::size_t payload_bytes) {
  std::vector<zmq::message_t> frames;
  frames.push_back(to_message(encode_header(h)));
  if (payload_bytes > 0) frames.emplace_back(payload_bytes);
  return frames;
}

Header worker_header(MsgType type, std::int64_t key, std::int64_t num_elems) {
  Header h;
  h.type = type;
  h.role = Role::kWorker;
  h.sender = 0;
  h.key = key;
  h.num_elems = num_elems;
  h.dtype = num_elems > 0 ? DType::kFloat32 : DType::kNone;
  return h;
}

}  // namespace

TEST_CASE("a server answers malformed requests with errors and keeps serving") {
  LocalCluster cluster(small_options(1));
  zmq::context_t& ctx = cluster.zmq_context();  // inproc peers share the cluster's
  const ParamLayout layout = layout_of(16);
  WorkerSession session(std::make_unique<ZmqTransport>(ctx), cluster.worker_options(), layout);
  std::vector<float> params(16, 1.0f);
  session.broadcast_initial(params);

  zmq::socket_t raw = make_socket(ctx, zmq::socket_type::dealer);
  connect_socket(raw, session.server_endpoints().at(0));

  std::vector<zmq::message_t> garbage;
  garbage.emplace_back(std::string_view("hello"));
  CHECK(error_reply(raw, std::move(garbage)).find("header frame is 5 bytes") != std::string::npos);

  Header bad_magic = worker_header(MsgType::kPull, 0, 0);
  bad_magic.magic = 1;
  CHECK(error_reply(raw, request(bad_magic, 0)).find("bad magic") != std::string::npos);

  CHECK(error_reply(raw, request(worker_header(MsgType::kPush, 0, 16), 60)).find("expected 64 payload bytes") !=
        std::string::npos);
  // Well-formed requests from a connection that is no worker's are refused
  // before anything else is looked at (the store's own checks: shard_store_test).
  for (const Header& h : {worker_header(MsgType::kPush, 0, 15), worker_header(MsgType::kPull, 42, 0),
                          worker_header(MsgType::kPush, 0, 16)}) {
    CHECK(error_reply(raw, request(h, static_cast<std::size_t>(h.num_elems) * 4))
              .find("from a connection no worker of this job was given: refused") != std::string::npos);
  }

  Header from_server = worker_header(MsgType::kPull, 0, 0);
  from_server.role = Role::kServer;
  CHECK(error_reply(raw, request(from_server, 0)).find("servers only serve workers") != std::string::npos);

  Header heartbeat = worker_header(MsgType::kHeartbeat, 0, 0);
  CHECK(error_reply(raw, request(heartbeat, 0)).find("refused") != std::string::npos);

  // A NaN gradient is refused and nothing is applied.
  std::vector<float> nan_grad(16, std::numeric_limits<float>::quiet_NaN());
  CHECK_THROWS_WITH_AS(session.kv().wait(session.kv().push(nan_grad, 0, 1.0)), doctest::Contains("non-finite"),
                       TransportError);

  // The server still works: a good push and pull.
  std::vector<float> grad(16, 1.0f);
  session.kv().wait(session.kv().push(grad, 0, 0.5));
  session.kv().wait(session.kv().pull(params, 1));
  for (float x : params) CHECK(x == 0.5f);
  session.finish();
  cluster.join();
}

TEST_CASE("a worker that stops heartbeating aborts the job, and everyone hears why") {
  LocalCluster cluster(small_options(2));
  zmq::context_t& ctx = cluster.zmq_context();  // inproc peers share the cluster's
  const ParamLayout layout = layout_of(8);
  std::string worker0_error;
  std::thread w0([&] {
    try {
      WorkerSession session(std::make_unique<ZmqTransport>(ctx), cluster.worker_options(0), layout);
      session.scheduler().barrier("never completes");
    } catch (const AbortedError& e) {
      worker0_error = e.what();
    }
  });
  {
    WorkerSession dying(std::make_unique<ZmqTransport>(ctx), cluster.worker_options(1), layout);
    // Leaves without finish(): its heartbeats stop when the session is destroyed.
  }
  w0.join();
  CHECK(worker0_error.find("worker 1") != std::string::npos);
  CHECK(worker0_error.find("sent no heartbeat") != std::string::npos);
  CHECK_THROWS_WITH_AS(cluster.join(), doctest::Contains("sent no heartbeat"), AbortedError);
}

TEST_CASE("a worker's reported failure aborts the job") {
  LocalCluster cluster(small_options(2));
  zmq::context_t& ctx = cluster.zmq_context();  // inproc peers share the cluster's
  const ParamLayout layout = layout_of(8);
  std::string worker0_error;
  std::thread w0([&] {
    try {
      WorkerSession session(std::make_unique<ZmqTransport>(ctx), cluster.worker_options(0), layout);
      std::vector<float> params(8, 0.0f);
      session.broadcast_initial(params);
      session.kv().wait(session.kv().pull(params, 5));  // a version that never comes
    } catch (const AbortedError& e) {
      worker0_error = e.what();
    }
  });
  {
    WorkerSession session(std::make_unique<ZmqTransport>(ctx), cluster.worker_options(1), layout);
    session.report_failure("worker 1: out of memory (simulated)");
  }
  w0.join();
  CHECK(worker0_error.find("worker 1 failed: worker 1: out of memory (simulated)") != std::string::npos);
  CHECK_THROWS_AS(cluster.join(), AbortedError);
}

TEST_CASE("registration times out naming who is missing") {
  LocalClusterOptions o = small_options(2);
  o.cluster.timeout_ms = 500;
  LocalCluster cluster(o);
  zmq::context_t& ctx = cluster.zmq_context();  // inproc peers share the cluster's
  CHECK_THROWS_WITH_AS(WorkerSession(std::make_unique<ZmqTransport>(ctx), cluster.worker_options(0), layout_of(4)),
                       doctest::Contains("registered 1/1 servers and 1/2 workers"), AbortedError);
  CHECK_THROWS_AS(cluster.join(), AbortedError);
}

TEST_CASE("workers with different models are refused") {
  LocalCluster cluster(small_options(2));
  zmq::context_t& ctx = cluster.zmq_context();  // inproc peers share the cluster's
  std::string err0, err1;
  std::thread w0([&] {
    try { WorkerSession s(std::make_unique<ZmqTransport>(ctx), cluster.worker_options(0), layout_of(4)); } catch (const Error& e) { err0 = e.what(); }
  });
  std::thread w1([&] {
    try { WorkerSession s(std::make_unique<ZmqTransport>(ctx), cluster.worker_options(1), layout_of(5)); } catch (const Error& e) { err1 = e.what(); }
  });
  w0.join();
  w1.join();
  // The one that registered second is refused at once with the reason (it
  // never joins); the first waits for a second worker until the
  // registration times out, and the job fails.
  const bool refused0 = err0.find("different model layout") != std::string::npos;
  const bool refused1 = err1.find("different model layout") != std::string::npos;
  CHECK(refused0 != refused1);
  CHECK((refused0 ? err1 : err0).find("registered 1/1 servers and 1/2 workers") != std::string::npos);
  CHECK_THROWS_AS(cluster.join(), AbortedError);
}
