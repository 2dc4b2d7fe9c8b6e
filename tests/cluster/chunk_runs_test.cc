// Several chunks per message (kPushChunks, kPullChunks; common/wire/protocol.h)
// at a real server over tcp: each chunk of a run is served as the
// single-chunk request it stands for and answered on its own (request id +
// i, key + i); a run the server does not hold whole, whose payload does not
// hold its chunks, or refused at admission, gets an error per chunk; one chunk's refusal leaves
// the others of its run applied. The KV client's own runs end with the
// weights single-chunk requests give.
#include <doctest/doctest.h>

#include <cstring>
#include <limits>
#include <thread>

#include "common/base/errors.h"
#include "common/config/job_fingerprint.h"
#include "common/node/scheduler_client.h"
#include "common/transport/zmq/zmq_socket.h"
#include "common/transport/zmq/zmq_transport.h"
#include "tools/cluster/local_cluster.h"
#include "worker/client/kv_client.h"

using namespace pstrain;
using std::chrono::milliseconds;

namespace {

LocalClusterOptions run_options(int workers) {
  LocalClusterOptions o;
  o.mode = Mode::kAsync;
  o.num_servers = 1;
  o.num_workers = workers;
  o.optimizer.momentum = 0.0;
  o.partition_bytes = 64;  // 16 floats a chunk: w is chunks 0-3, b chunk 4
  o.transport = "tcp";
  o.cluster.timeout_ms = 10000;
  o.log_level = LogLevel::kError;
  return o;
}

ParamLayout layout() {
  ParamLayout l;
  l.add("w", {64});
  l.add("b", {4});
  return l;
}

Header run_request(MsgType type, std::int64_t key, std::int64_t count, std::uint64_t id) {
  Header h;
  h.type = type;
  h.role = Role::kWorker;
  h.sender = 1;
  h.request_id = id;
  h.key = key;
  h.version = count;
  h.lr = type == MsgType::kPushChunks ? 0.5 : 0.0;
  return h;
}

// The next `count` replies on `s`, in the order they came.
std::vector<Message> replies(zmq::socket_t& s, int count) {
  std::vector<Message> out;
  for (int i = 0; i < count; ++i) {
    auto env = receive_message(s, false, milliseconds(5000), DecodeLimits{});
    REQUIRE(env.has_value());
    out.push_back(std::move(env->message));
  }
  return out;
}

}  // namespace

TEST_CASE("several chunks per message: each chunk of a run is answered on its own, errors per chunk") {
  LocalCluster cluster(run_options(2));
  zmq::context_t& ctx = cluster.zmq_context();
  std::thread real([&] {  // worker 0: the initial weights, then waits for worker 1's checks
    WorkerSession session(std::make_unique<ZmqTransport>(ctx), cluster.worker_options(0), layout());
    std::vector<float> params(68, 1.0f);
    session.broadcast_initial(params);
    session.scheduler().barrier("checked");
    session.finish();
  });
  SchedulerClient sc(std::make_unique<ZmqTransport>(ctx), cluster.scheduler_endpoint(), Role::kWorker,
                     run_options(2).cluster, nullptr, cluster.worker_options(1).security);
  RegisterRequest req;
  req.requested_rank = 1;
  req.host = "test";
  req.job_fingerprint = job_fingerprint(Mode::kAsync, 64, 1, 2);
  req.layout = layout();
  const RegisterReply info = sc.register_node(req);
  REQUIRE(info.rank == 1);
  sc.barrier("initial weights");
  zmq::socket_t own = make_socket(ctx, zmq::socket_type::dealer);
  own.set(zmq::sockopt::routing_id, "w" + sc.token());
  connect_socket(own, info.server_endpoints.at(0));

  // Chunks 0-2 in one push: three push replies, ids 100-102, keys 0-2.
  const std::vector<float> ones(48, 1.0f);
  send_message(own, nullptr, run_request(MsgType::kPushChunks, 0, 3, 100), Payload::floats(ones));
  std::vector<Message> got = replies(own, 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    CHECK(got[i].header.type == MsgType::kPushReply);
    CHECK(got[i].header.request_id == 100 + i);
    CHECK(got[i].header.key == static_cast<std::int64_t>(i));
    CHECK(got[i].header.version == 1);
  }
  // All five chunks in one pull: five pull replies of one chunk each.
  send_message(own, nullptr, run_request(MsgType::kPullChunks, 0, 5, 200));
  got = replies(own, 5);
  std::vector<float> chunk;
  for (std::size_t i = 0; i < 5; ++i) {
    CAPTURE(i);
    REQUIRE(got[i].header.type == MsgType::kPullReply);
    CHECK(got[i].header.request_id == 200 + i);
    CHECK(got[i].header.key == static_cast<std::int64_t>(i));
    CHECK(got[i].header.num_elems == (i < 4 ? 16 : 4));
    chunk.assign(static_cast<std::size_t>(got[i].header.num_elems), 0.0f);
    got[i].copy_floats_to(chunk);
    for (const float x : chunk) CHECK(x == (i < 3 ? 0.5f : 1.0f));  // 1 - 0.5 x 1 where pushed
  }
  // A payload that does not hold its chunks (16 + 4 elements): an error for each chunk.
  send_message(own, nullptr, run_request(MsgType::kPushChunks, 3, 2, 300), Payload::floats(std::span(ones).first(19)));
  got = replies(own, 2);
  for (std::size_t i = 0; i < 2; ++i) {
    CHECK(got[i].header.type == MsgType::kError);
    CHECK(got[i].header.status == Status::kBadRequest);
    CHECK(got[i].header.request_id == 300 + i);
    CHECK(got[i].text_payload().find("19 elements for chunks of 20") != std::string::npos);
  }
  // A run past the server's chunks: not its own, per chunk.
  send_message(own, nullptr, run_request(MsgType::kPullChunks, 4, 3, 400));
  got = replies(own, 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(got[i].header.type == MsgType::kError);
    CHECK(got[i].header.status == Status::kNotOwner);
    CHECK(got[i].header.request_id == 400 + i);
  }
  // A NaN in chunk 1 of a run: that chunk refused, chunks 0 and 2 applied.
  std::vector<float> nan(48, 1.0f);
  nan[20] = std::numeric_limits<float>::quiet_NaN();
  Header again = run_request(MsgType::kPushChunks, 0, 3, 500);
  again.step = 1;
  send_message(own, nullptr, again, Payload::floats(nan));
  got = replies(own, 3);
  CHECK(got[0].header.type == MsgType::kPushReply);
  CHECK(got[1].header.type == MsgType::kError);
  CHECK(got[1].header.status == Status::kRejected);
  CHECK(got[1].header.key == 1);
  CHECK(got[2].header.type == MsgType::kPushReply);
  CHECK(got[2].header.version == 2);
  // A run refused whole at admission (a connection no worker was given): an error per chunk.
  zmq::socket_t stranger = make_socket(ctx, zmq::socket_type::dealer);
  connect_socket(stranger, info.server_endpoints.at(0));
  send_message(stranger, nullptr, run_request(MsgType::kPullChunks, 1, 3, 700));
  got = replies(stranger, 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(got[i].header.type == MsgType::kError);
    CHECK(got[i].header.request_id == 700 + i);
    CHECK(got[i].header.key == static_cast<std::int64_t>(1 + i));
    CHECK(got[i].text_payload().find("no worker of this job was given") != std::string::npos);
  }
  // A malformed run (count 0) gets one error; the server goes on.
  send_message(own, nullptr, run_request(MsgType::kPullChunks, 0, 0, 600));
  got = replies(own, 1);
  CHECK(got[0].header.type == MsgType::kError);
  CHECK(got[0].text_payload().find("chunk count (version) 0 outside [1, 64]") != std::string::npos);
  sc.barrier("checked");
  sc.finish();
  real.join();
  CHECK_NOTHROW(cluster.join());
}

// Three sync steps of one worker against one server, with Nesterov momentum:
// the whole model per push and pull (the KV client sends runs: the pulls one
// message, the pushes at most a largest chunk each: 0, 1, 2, 3+4), or one
// chunk per call (single-chunk messages). Returns the final weights.
std::vector<float> three_steps(bool per_chunk) {
  LocalClusterOptions o = run_options(1);
  o.mode = Mode::kSync;
  o.optimizer.momentum = 0.9;
  o.optimizer.nesterov = true;
  o.optimizer.weight_decay = 1e-3;
  o.transport = "inproc";
  LocalCluster cluster(o);
  WorkerSession session(std::make_unique<ZmqTransport>(cluster.zmq_context()), cluster.worker_options(0), layout());
  KVClient& kv = session.kv();
  std::vector<float> params(68), grad(68);
  for (std::size_t i = 0; i < params.size(); ++i) params[i] = 0.01f * static_cast<float>(i);
  session.broadcast_initial(params);
  const auto chunks = static_cast<std::int64_t>(session.shard_map().chunks().size());
  REQUIRE(chunks == 5);
  for (int step = 0; step <= 3; ++step) {
    std::vector<KVClient::Ticket> tickets;
    for (std::int64_t k = 0; k < (per_chunk ? chunks : 1); ++k) {
      const std::int64_t one[] = {k};
      tickets.push_back(kv.pull(params, step, per_chunk ? std::span<const std::int64_t>(one) : std::span<const std::int64_t>()));
    }
    for (const KVClient::Ticket t : tickets) kv.wait(t);
    if (step == 3) break;
    tickets.clear();
    for (std::size_t i = 0; i < grad.size(); ++i) grad[i] = 0.1f * static_cast<float>((i * 7 + step) % 5) - 0.2f;
    for (std::int64_t k = 0; k < (per_chunk ? chunks : 1); ++k) {
      const std::int64_t one[] = {k};
      tickets.push_back(kv.push(grad, step, 0.5, per_chunk ? std::span<const std::int64_t>(one) : std::span<const std::int64_t>()));
    }
    for (const KVClient::Ticket t : tickets) kv.wait(t);
  }
  session.finish();
  CHECK_NOTHROW(cluster.join());
  return params;
}

TEST_CASE("several chunks per message: the KV client's runs give the weights of single-chunk requests, bit for bit") {
  const std::vector<float> runs = three_steps(false);
  const std::vector<float> singles = three_steps(true);
  REQUIRE(runs.size() == singles.size());
  CHECK(std::memcmp(runs.data(), singles.data(), runs.size() * sizeof(float)) == 0);
  CHECK(runs[0] != 0.0f);  // trained: not the initial weights
  CHECK(runs[67] != 0.67f);
}
