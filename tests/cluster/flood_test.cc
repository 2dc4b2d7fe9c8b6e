// Bounded queues (common/transport/transport.h): unpaced floods and peers that never
// read their replies cannot grow a node's memory without limit or block its
// loop, and the real job still finishes.
#include <doctest/doctest.h>

#include <atomic>
#include <fstream>
#include <string>
#include <thread>

#include "common/base/errors.h"
#include "common/transport/transport.h"
#include "tools/cluster/local_cluster.h"
#include "common/transport/zmq/zmq_transport.h"
#include "common/transport/zmq/zmq_socket.h"

using namespace pstrain;
using std::chrono::milliseconds;

namespace {

// This process's resident set (VmRSS) in bytes.
std::int64_t rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return 0;
}

}  // namespace

TEST_CASE("a flood of pushes from unpaced peers that never read their replies stays within the queue bounds") {
  LocalClusterOptions o;
  o.num_servers = 1;
  o.num_workers = 1;
  o.optimizer.momentum = 0.0;
  o.transport = "tcp";
  o.cluster.timeout_ms = 20000;
  o.cluster.heartbeat_interval_ms = 50;
  o.cluster.heartbeat_timeout_ms = 5000;
  o.log_level = LogLevel::kError;
  LocalCluster cluster(o);
  zmq::context_t& ctx = cluster.zmq_context();  // inproc peers share the cluster's
  ParamLayout layout;
  layout.add("w", {16});
  WorkerSession session(std::make_unique<ZmqTransport>(ctx), cluster.worker_options(0), layout);
  std::vector<float> params(16, 1.0f);
  session.broadcast_initial(params);
  const std::string server = session.server_endpoints().at(0);

  // 4 flooders: 256 KiB pushes and pulls as fast as they go, replies never read.
  // Their own queues are small (16 messages) so what grows is the node's.
  constexpr int kFlooders = 4;
  constexpr std::size_t kPayloadFloats = 64 * 1024;  // 256 KiB
  const std::vector<float> payload(kPayloadFloats, 1.0f);
  std::atomic<bool> stop{false};
  std::atomic<std::int64_t> sent{0};
  std::vector<std::thread> flooders;
  for (int f = 0; f < kFlooders; ++f) {
    flooders.emplace_back([&] {
      SocketOptions so{std::int64_t{1} << 20, milliseconds(0)};
      so.send_hwm = 16;
      so.send_timeout = milliseconds(0);
      zmq::socket_t s = make_socket(ctx, zmq::socket_type::dealer, so);
      connect_socket(s, server);
      Header h;
      h.role = Role::kWorker;
      h.sender = 0;
      h.key = 0;
      while (!stop.load()) {
        h.type = (h.request_id % 2 == 0) ? MsgType::kPush : MsgType::kPull;
        ++h.request_id;
        try {
          send_message(s, nullptr, h, h.type == MsgType::kPush ? Payload::floats(payload) : Payload());
          sent.fetch_add(1);
        } catch (const TransportError&) {
          std::this_thread::yield();  // our queue is full: the server is reading as fast as it will
        }
      }
    });
  }
  const std::int64_t before = rss_bytes();
  std::int64_t peak = before;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  // The real worker trains during the flood.
  std::vector<float> grad(16, 1.0f);
  int step = 0;
  while (std::chrono::steady_clock::now() < end) {
    session.kv().wait(session.kv().pull(params, step));
    session.kv().wait(session.kv().push(grad, step, 0.001));
    ++step;
    peak = std::max(peak, rss_bytes());
  }
  stop = true;
  for (auto& t : flooders) t.join();
  MESSAGE("flood: " << sent.load() << " messages sent; RSS " << before / (1 << 20) << " MiB -> peak "
                    << peak / (1 << 20) << " MiB; " << step << " real steps during it");
  CHECK(sent.load() > 1000);
  // The hard bound is the server's receive queue per flooder:
  // kDefaultReceiveHwm (1000) messages of 256 KiB. The server drains faster
  // than that fills here: the bounded build peaked at +25 MiB, one with
  // unlimited queues (HWM 0, as before) at +136 MiB in 3 s and growing, so
  // the test states 128 MiB of growth over 5 s.
  CHECK(peak - before < (std::int64_t{128} << 20));
  CHECK(step > 10);
  session.kv().wait(session.kv().pull(params, step));
  session.finish();
  CHECK_NOTHROW(cluster.join());
}

TEST_CASE("a worker with more chunks per server than the default queue bounds gets every reply") {
  // 12000 chunks of 4 KiB on one server: one ticket's pull replies (48 MB)
  // exceed the default HWMs (1000 received, 4000 unsent) and what TCP holds;
  // the KV client sizes its queues by its chunks, so no reply is dropped at
  // the server's bounded send queue.
  LocalClusterOptions o;
  o.num_servers = 1;
  o.num_workers = 1;
  o.optimizer.momentum = 0.0;
  o.transport = "tcp";
  o.partition_bytes = 4096;
  o.cluster.timeout_ms = 30000;
  o.log_level = LogLevel::kError;
  LocalCluster cluster(o);
  zmq::context_t& ctx = cluster.zmq_context();  // inproc peers share the cluster's
  ParamLayout layout;
  layout.add("w", {12000 * 1024});
  WorkerSession session(std::make_unique<ZmqTransport>(ctx), cluster.worker_options(0), layout);
  REQUIRE(session.shard_map().chunks().size() == 12000);
  std::vector<float> params(12000 * 1024, 1.0f);
  session.broadcast_initial(params);
  std::vector<float> grad(12000 * 1024, 1.0f);
  for (int step = 0; step < 2; ++step) {
    const auto push = session.kv().push(grad, step, 0.5);
    const auto pull = session.kv().pull(params, step + 1);
    session.kv().wait(push);
    session.kv().wait(pull);
  }
  for (float x : params) REQUIRE(x == 0.0f);
  session.finish();
  CHECK_NOTHROW(cluster.join());
}
