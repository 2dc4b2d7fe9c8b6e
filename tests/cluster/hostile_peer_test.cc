// Peers that misbehave on purpose, over real tcp sockets: requests whose
// sender leaves before the error reply, messages claiming another node's
// rank, a foreign job's registration, far-future pulls. No node dies, no
// forged message is taken, and the real job finishes.
#include <doctest/doctest.h>

#include <thread>

#include "common/base/errors.h"
#include "common/config/job_fingerprint.h"
#include "common/node/scheduler_client.h"
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

LocalClusterOptions tcp_options(int workers) {
  LocalClusterOptions o;
  o.num_servers = 1;
  o.num_workers = workers;
  o.optimizer.momentum = 0.0;
  o.transport = "tcp";
  o.cluster.timeout_ms = 10000;
  o.cluster.heartbeat_interval_ms = 50;
  o.cluster.heartbeat_timeout_ms = 2000;
  o.log_level = LogLevel::kError;
  return o;
}

ParamLayout layout_of(std::int64_t n) {
  ParamLayout layout;
  layout.add("w", {n});
  return layout;
}

Header forged(MsgType type, Role role, int sender) {
  Header h;
  h.type = type;
  h.role = role;
  h.sender = sender;
  return h;
}

// Sends one message and returns the error text of the reply (or "" for none in 3 s).
std::string send_and_read_error(zmq::socket_t& raw, const Header& h, const std::string& body = "") {
  send_message(raw, nullptr, h, body.empty() ? Payload() : Payload::bytes(body));
  auto env = receive_message(raw, false, milliseconds(3000), DecodeLimits{});
  if (!env) return "";
  CHECK(env->message.header.type == MsgType::kError);
  return env->message.text_payload();
}

// A connection that sends `frames` and leaves at once, before any reply.
void hit_and_run(zmq::context_t& ctx, const std::string& endpoint, const Header& h, const std::string& body) {
  zmq::socket_t s = make_socket(ctx, zmq::socket_type::dealer, SocketOptions{std::int64_t{1} << 20, milliseconds(0)});
  connect_socket(s, endpoint);
  send_message(s, nullptr, h, body.empty() ? Payload() : Payload::bytes(body));
  // close with linger 100 ms: the request goes out, the reply finds nobody
  s.set(zmq::sockopt::linger, 100);
}

// A tiny sync job of `steps` steps with one worker; throws what it throws.
void train_steps(WorkerSession& session, int steps) {
  std::vector<float> params(16, 1.0f);
  session.broadcast_initial(params);
  std::vector<float> grad(16, 1.0f);
  for (int step = 0; step < steps; ++step) {
    session.kv().wait(session.kv().pull(params, step));
    session.kv().wait(session.kv().push(grad, step, 0.5));
  }
  session.kv().wait(session.kv().pull(params, steps));
  for (float x : params) CHECK(x == 1.0f - 0.5f * static_cast<float>(steps));
}

}  // namespace

TEST_CASE("requests whose sender left before the error reply do not stop the scheduler or a server") {
  LocalCluster cluster(tcp_options(1));
  zmq::context_t& ctx = cluster.zmq_context();  // inproc peers share the cluster's
  WorkerSession session(std::make_unique<ZmqTransport>(ctx), cluster.worker_options(0), layout_of(16));
  // 200 bad store-sets to the scheduler (an empty key is refused), each from a
  // connection that leaves at once: the refusals find their peers gone.
  Header set = forged(MsgType::kStoreSet, Role::kWorker, 0);
  for (int i = 0; i < 200; ++i) hit_and_run(ctx, cluster.scheduler_endpoint(), set, "not a store body");
  // 500 pulls of a chunk the server does not hold, the same way.
  Header pull = forged(MsgType::kPull, Role::kWorker, 0);
  pull.key = 42;
  for (int i = 0; i < 500; ++i) hit_and_run(ctx, session.server_endpoints().at(0), pull, "");
  std::this_thread::sleep_for(milliseconds(300));
  train_steps(session, 3);  // both still serve
  session.finish();
  CHECK_NOTHROW(cluster.join());
}

TEST_CASE("heartbeat, done, abort and barrier are taken only from the node they name") {
  LocalCluster cluster(tcp_options(1));
  zmq::context_t& ctx = cluster.zmq_context();  // inproc peers share the cluster's
  WorkerSession session(std::make_unique<ZmqTransport>(ctx), cluster.worker_options(0), layout_of(16));
  zmq::socket_t raw = make_socket(ctx, zmq::socket_type::dealer);
  connect_socket(raw, cluster.scheduler_endpoint());
  for (MsgType type : {MsgType::kHeartbeat, MsgType::kDone, MsgType::kBarrier, MsgType::kAbort}) {
    CAPTURE(to_string(type));
    const std::string why = send_and_read_error(raw, forged(type, Role::kWorker, 0),
                                                type == MsgType::kAbort     ? "out of memory (forged)"
                                                : type == MsgType::kBarrier ? "x"
                                                                            : "");
    CHECK(why.find("claiming to be worker 0 from a connection that is not the one it registered on") !=
          std::string::npos);
  }
  // A heartbeat connection named like a node's but with a guessed token is refused too.
  zmq::socket_t fake_hb = make_socket(ctx, zmq::socket_type::dealer);
  fake_hb.set(zmq::sockopt::routing_id, std::string("h0123456789abcdef0123456789abcdef"));
  connect_socket(fake_hb, cluster.scheduler_endpoint());
  CHECK(send_and_read_error(fake_hb, forged(MsgType::kHeartbeat, Role::kWorker, 0)).find("not the one it registered on") !=
        std::string::npos);
  // The forged abort did not end the job, the forged done did not finish it:
  // the real worker trains and finishes, and the job ends normally.
  train_steps(session, 2);
  session.finish();
  CHECK_NOTHROW(cluster.join());
}

TEST_CASE("a registration with another job's fingerprint is refused and does not abort the job") {
  pstrain::test::StderrCapture log;  // the scheduler's log, to wait for the server's registration
  LocalClusterOptions o = tcp_options(1);
  o.log_level = LogLevel::kInfo;
  o.open_registration = true;  // the rule behind the job secret's challenge (admission_run_test: the challenge)
  LocalCluster cluster(o);
  zmq::context_t& ctx = cluster.zmq_context();  // inproc peers share the cluster's
  // The server has registered; an outsider registers as a worker of another job.
  zmq::socket_t raw = make_socket(ctx, zmq::socket_type::dealer);
  connect_socket(raw, cluster.scheduler_endpoint());
  RegisterRequest req;
  req.role = Role::kWorker;
  req.host = "outsider";
  req.job_fingerprint = "mode=async partition_bytes=1 servers=9 workers=9";
  req.layout = layout_of(16);
  Header h = forged(MsgType::kRegister, Role::kWorker, -1);
  REQUIRE(pstrain::test::wait_until([&] { return log.has("registered server from"); }, milliseconds(30000),
                                     "the server's registration"));  // the server registers first
  send_message(raw, nullptr, h, Payload::bytes(wire_encode(req)));
  auto env = receive_message(raw, false, milliseconds(3000), DecodeLimits{});
  REQUIRE(env.has_value());
  CHECK(env->message.text_payload().find("runs a different job") != std::string::npos);
  // The real worker still registers and the job runs.
  WorkerSession session(std::make_unique<ZmqTransport>(ctx), cluster.worker_options(0), layout_of(16));
  train_steps(session, 2);
  session.finish();
  CHECK_NOTHROW(cluster.join());
}

TEST_CASE("a push in another worker's name is refused at the server, with or without a worker's connection") {
  LocalCluster cluster(tcp_options(2));
  zmq::context_t& ctx = cluster.zmq_context();  // inproc peers share the cluster's
  std::vector<float> weights_after;
  std::thread real([&] {
    WorkerSession session(std::make_unique<ZmqTransport>(ctx), cluster.worker_options(0), layout_of(16));
    std::vector<float> params(16, 1.0f);
    session.broadcast_initial(params);
    session.scheduler().barrier("forgeries sent");
    session.kv().wait(session.kv().pull(params, 0));
    weights_after = params;
    session.scheduler().barrier("checked");
    session.finish();
  });
  // Worker 1 registers by hand: it has its own token and a connection named by it.
  SchedulerClient sc(std::make_unique<ZmqTransport>(ctx), cluster.scheduler_endpoint(), Role::kWorker, tcp_options(2).cluster,
                     nullptr, cluster.worker_options(1).security);  // with the job's secret
  RegisterRequest req;
  req.requested_rank = 1;
  req.host = "test";
  req.job_fingerprint = job_fingerprint(Mode::kSync, std::int64_t{1} << 20, 1, 2);
  req.layout = layout_of(16);
  const RegisterReply info = sc.register_node(req);
  REQUIRE(info.rank == 1);
  sc.barrier("initial weights");
  zmq::socket_t own = make_socket(ctx, zmq::socket_type::dealer);
  own.set(zmq::sockopt::routing_id, "w" + sc.token());
  connect_socket(own, info.server_endpoints.at(0));
  zmq::socket_t stranger = make_socket(ctx, zmq::socket_type::dealer);
  connect_socket(stranger, info.server_endpoints.at(0));
  Header push = forged(MsgType::kPush, Role::kWorker, 0);  // in worker 0's name
  push.key = 0;
  push.lr = 1.0;
  const std::vector<float> huge(16, 100.0f);
  for (zmq::socket_t* s : {&own, &stranger}) {
    send_message(*s, nullptr, push, Payload::floats(huge));
    auto env = receive_message(*s, false, milliseconds(3000), DecodeLimits{});
    REQUIRE(env.has_value());
    CHECK(env->message.header.type == MsgType::kError);
    const std::string why = env->message.text_payload();
    CHECK(why.find(s == &own ? "claiming to be worker 0 on worker 1's connection: refused"
                             : "from a connection no worker of this job was given: refused") != std::string::npos);
  }
  sc.barrier("forgeries sent");
  sc.barrier("checked");
  sc.finish();
  real.join();
  // Nothing was applied: worker 0 still pulls its own initial weights at version 0.
  CHECK(weights_after == std::vector<float>(16, 1.0f));
  CHECK_NOTHROW(cluster.join());
}

TEST_CASE("far-future pulls are capped per connection and expire after timeout_ms") {
  LocalClusterOptions o = tcp_options(1);
  o.cluster.timeout_ms = 1500;  // the servers drop a parked pull after this
  LocalCluster cluster(o);
  zmq::context_t& ctx = cluster.zmq_context();  // inproc peers share the cluster's
  WorkerSessionOptions wo = cluster.worker_options(0);
  wo.cluster.timeout_ms = 20000;  // the worker itself waits longer, to see the server's answer
  WorkerSession session(std::make_unique<ZmqTransport>(ctx), wo, layout_of(16));
  std::vector<float> params(16, 1.0f);
  session.broadcast_initial(params);
  // The server holds one chunk: at most kMaxParkedPerChunk parked pulls per connection.
  std::vector<KVClient::Ticket> tickets;
  std::vector<float> sink(16);
  for (int i = 0; i < kMaxParkedPerChunk + 3; ++i) tickets.push_back(session.kv().pull(sink, 1000000 + i));
  int refused = 0, expired = 0;
  for (const KVClient::Ticket t : tickets) {
    try {
      session.kv().wait(t);
    } catch (const TransportError& e) {
      const std::string text = e.what();
      if (text.find("pulls waiting; refused") != std::string::npos) ++refused;
      if (text.find("not answerable within 1500 ms") != std::string::npos) ++expired;
    }
  }
  CHECK(refused == 3);                   // over the cap: refused at once
  CHECK(expired == kMaxParkedPerChunk);  // the parked ones: dropped after timeout_ms
  // The worker was not slowed or blocked by any of it.
  std::vector<float> grad(16, 1.0f);
  session.kv().wait(session.kv().pull(params, 0));
  session.kv().wait(session.kv().push(grad, 0, 0.5));
  session.kv().wait(session.kv().pull(params, 1));
  for (float x : params) CHECK(x == 0.5f);
  session.finish();
  CHECK_NOTHROW(cluster.join());
}

TEST_CASE("warnings about a peer's bad input are limited per peer") {
  std::FILE* sink = std::tmpfile();
  REQUIRE(sink != nullptr);
  Logger log("test", LogLevel::kInfo, sink);
  PeerWarnings w(log, 3, milliseconds(1000), 2);
  const auto t0 = PeerWarnings::Clock::now();
  for (int i = 0; i < 100; ++i) w.warn("peer a", "bad", t0);
  CHECK(w.written() == 3);
  CHECK(w.suppressed() == 97);
  w.warn("peer b", "bad", t0);
  for (int i = 0; i < 50; ++i) w.warn("peer " + std::to_string(i + 100), "bad", t0);  // beyond max_peers: one shared entry
  CHECK(w.written() == 3 + 1 + 3);
  w.warn("peer a", "bad again", t0 + milliseconds(1500));  // a new window: the count line, then the warning
  CHECK(w.written() == 8);
  std::fclose(sink);
}
