// The transport interface (common/transport/transport.h) over every implementation
// from one fixture: ZeroMQ over tcp, ipc and inproc, shared memory (tcp
// plus segments; its own cases are in shm_transport_test.cc), and the fake.
// Then what only the fake does: its fault plan, deterministic from a seed.
#include <doctest/doctest.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/base/errors.h"
#include "common/transport/fake/fake_transport.h"
#include "common/base/log.h"
#include "common/wire/security.h"
#include "common/transport/shm/shm_transport.h"
#include "common/transport/transport.h"
#include "common/transport/zmq/zmq_transport.h"

using namespace pstrain;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

namespace {

const char* const kKinds[] = {"tcp", "ipc", "inproc", "shm", "fake"};

struct Net {
  zmq::context_t ctx;
  std::unique_ptr<Transport> transport;
  std::string address;  // where to listen

  explicit Net(const std::string& kind) {
    char tag[64];
    std::snprintf(tag, sizeof(tag), "%d-%p", static_cast<int>(getpid()), static_cast<void*>(this));
    if (kind == "fake") {
      transport = std::make_unique<FakeTransport>(7);
      address = "fake://listener-*";
    } else if (kind == "shm") {
      ShmTransportOptions o = shm_options_for(1 << 16);
      o.min_bytes = 1;  // the tests' small payloads through the slots too
      transport = std::make_unique<ShmTransport>(ctx, o);
      address = "tcp://127.0.0.1:*";
    } else {
      transport = std::make_unique<ZmqTransport>(ctx);
      address = kind == "tcp" ? "tcp://127.0.0.1:*"
                : kind == "ipc" ? "ipc:///tmp/pstrain-transport-test-" + std::string(tag)
                                : "inproc://transport-test-" + std::string(tag);
    }
  }
};

EndpointOptions with_identity(const std::string& identity) {
  EndpointOptions o;
  o.identity = identity;
  o.socket.send_timeout = milliseconds(2000);
  o.carries_tensors = true;  // shm: set up a segment (the others ignore it)
  return o;
}

Header push_header(std::int64_t key, std::int64_t step) {
  Header h;
  h.type = MsgType::kPush;
  h.role = Role::kWorker;
  h.sender = 3;
  h.request_id = 41;
  h.key = key;
  h.step = step;
  h.lr = 0.25;
  return h;
}

}  // namespace

TEST_CASE("every transport: a request and its reply round-trip, with the peer's identity, counted and validated") {
  for (const char* kind : kKinds) {
    SUBCASE(kind) {
      Net net(kind);
      TrafficCounters server_traffic, client_traffic;
      EndpointOptions lo;
      lo.traffic = &server_traffic;
      std::unique_ptr<Listener> listener = net.transport->listen(net.address, lo);
      CHECK(listener->address().find('*') == std::string::npos);  // resolved
      EndpointOptions co = with_identity("w0123");
      co.traffic = &client_traffic;
      std::unique_ptr<Connection> conn = net.transport->connect(listener->address(), co);

      const std::vector<float> grad{1.5f, -2.0f, 3.25f};
      conn->send(push_header(5, 9), Payload::floats(grad));
      Endpoint* const both[] = {listener.get(), conn.get()};
      const std::vector<bool> ready = wait_any(both, milliseconds(3000));
      CHECK(ready[0]);
      CHECK_FALSE(ready[1]);
      std::optional<Envelope> got = listener->receive(milliseconds(3000));
      REQUIRE(got.has_value());
      CHECK(got->from.bytes() == "w0123");
      CHECK(got->from.name() == "connection 7730313233");
      CHECK(got->user_id.empty());
      const Header& h = got->message.header;
      CHECK(h.type == MsgType::kPush);
      CHECK(h.key == 5);
      CHECK(h.step == 9);
      CHECK(h.lr == 0.25);
      CHECK(h.dtype == DType::kFloat32);
      CHECK(h.num_elems == 3);
      std::vector<float> scratch;
      const std::span<const float> values = got->message.float_payload(scratch);
      CHECK(std::vector<float>(values.begin(), values.end()) == grad);

      Header reply = h;
      reply.type = MsgType::kPushReply;
      reply.role = Role::kServer;
      listener->send(got->from, reply);
      std::optional<Envelope> back = conn->receive(milliseconds(3000));
      REQUIRE(back.has_value());
      CHECK(back->message.header.type == MsgType::kPushReply);
      CHECK(back->message.header.request_id == 41);
      CHECK_FALSE(back->message.has_payload);
      // Traffic: header + 12 payload bytes one way, a header back.
      CHECK(client_traffic.bytes_sent() == header_wire_bytes() + 12);
      CHECK(server_traffic.bytes_received() == client_traffic.bytes_sent());
      CHECK(server_traffic.bytes_sent() == header_wire_bytes());
      CHECK(client_traffic.bytes_received() == server_traffic.bytes_sent());

      // Nothing more: receive returns nothing within its timeout.
      CHECK_FALSE(conn->receive(milliseconds(50)).has_value());
      // Mandatory routing: a reply to a peer that never was raises, never waits.
      const auto start = Clock::now();
      CHECK_THROWS_AS(listener->send(PeerId("nobody"), reply), TransportError);
      // Waiting would take the send timeout (120 s by default); 10 s is the
      // margin for a loaded machine.
      CHECK(Clock::now() - start < std::chrono::seconds(10));
    }
  }
}

TEST_CASE("every transport: a malformed message is refused by decode_message, naming its sender, and the listener goes on") {
  for (const char* kind : kKinds) {
    SUBCASE(kind) {
      Net net(kind);
      std::unique_ptr<Listener> listener = net.transport->listen(net.address, EndpointOptions{});
      std::unique_ptr<Connection> conn = net.transport->connect(listener->address(), with_identity("bad"));
      // A push without its gradient breaks the protocol (validate_payload).
      Header h = push_header(1, 0);
      conn->send(h);
      PeerId from;
      CHECK_THROWS_AS(listener->receive(milliseconds(3000), &from), ProtocolError);
      CHECK(from.bytes() == "bad");
      // Decode limits apply on every transport: a payload over the listener's limit.
      const std::vector<float> big(64, 1.0f);
      conn->send(push_header(1, 0), Payload::floats(big));
      std::optional<Envelope> ok = listener->receive(milliseconds(3000));
      REQUIRE(ok.has_value());
      CHECK(ok->message.header.num_elems == 64);
    }
  }
}

TEST_CASE("every transport: the decode limits of the listener refuse a payload over them") {
  for (const char* kind : kKinds) {
    SUBCASE(kind) {
      Net net(kind);
      EndpointOptions lo;
      lo.limits.max_payload_bytes = 100;
      std::unique_ptr<Listener> listener = net.transport->listen(net.address, lo);
      std::unique_ptr<Connection> conn = net.transport->connect(listener->address(), with_identity("big"));
      const std::vector<float> big(64, 1.0f);  // 256 bytes: at most 25 floats fit
      conn->send(push_header(1, 0), Payload::floats(big));
      CHECK_THROWS_WITH_AS(listener->receive(milliseconds(3000)), doctest::Contains("num_elems 64 outside [0, 25]"), ProtocolError);
    }
  }
}

TEST_CASE("fake transport: a vanished connection's replies raise TransportError; other peers are served") {
  FakeTransport net(3);
  std::unique_ptr<Listener> listener = net.listen("fake://s", EndpointOptions{});
  std::unique_ptr<Connection> a = net.connect("fake://s", with_identity("a"));
  std::unique_ptr<Connection> b = net.connect("fake://s", with_identity("b"));
  a->send(push_header(0, 0), Payload::floats(std::vector<float>{1.0f}));
  b->send(push_header(0, 0), Payload::floats(std::vector<float>{1.0f}));
  auto first = listener->receive(milliseconds(1000));
  auto second = listener->receive(milliseconds(1000));
  REQUIRE(first);
  REQUIRE(second);
  net.disconnect("a");
  Header r;
  r.type = MsgType::kPushReply;
  CHECK_THROWS_WITH_AS(listener->send(PeerId("a"), r), doctest::Contains("has gone"), TransportError);
  CHECK_NOTHROW(listener->send(PeerId("b"), r));
  CHECK(b->receive(milliseconds(1000)).has_value());
}

TEST_CASE("fake transport: drop the nth message of a type, delay one, hold one until the next has passed") {
  FakeTransport net(11);
  std::unique_ptr<Listener> listener = net.listen("fake://s", EndpointOptions{});
  std::unique_ptr<Connection> c = net.connect("fake://s", with_identity("w"));
  FakeFault drop;
  drop.action = FakeFault::Action::kDrop;
  drop.type = MsgType::kPush;
  drop.nth = 2;
  const std::size_t drop_rule = net.add_fault(drop);
  FakeFault hold;
  hold.action = FakeFault::Action::kHold;
  hold.type = MsgType::kPush;
  hold.step = 4;
  net.add_fault(hold);
  FakeFault delay;
  delay.action = FakeFault::Action::kDelay;
  delay.type = MsgType::kPull;
  delay.delay = milliseconds(300);
  net.add_fault(delay);

  const std::vector<float> g{1.0f};
  for (std::int64_t step = 1; step <= 5; ++step) c->send(push_header(0, step), Payload::floats(g));
  // Step 2 dropped; step 4 held until step 5 passed: 1, 3, 5, 4.
  std::vector<std::int64_t> steps;
  while (auto env = listener->receive(milliseconds(200))) steps.push_back(env->message.header.step);
  CHECK(steps == std::vector<std::int64_t>{1, 3, 5, 4});
  CHECK(net.acted(drop_rule) == 1);

  Header pull;
  pull.type = MsgType::kPull;
  pull.role = Role::kWorker;
  pull.sender = 0;
  const auto sent = Clock::now();
  c->send(pull);
  CHECK_FALSE(listener->receive(milliseconds(100)).has_value());  // not yet
  auto late = listener->receive(milliseconds(2000));
  REQUIRE(late.has_value());
  CHECK(Clock::now() - sent >= milliseconds(300));
}

TEST_CASE("fake transport: a probabilistic drop is the same for the same seed, different for another") {
  const auto survivors = [](std::uint64_t seed) {
    FakeTransport net(seed);
    std::unique_ptr<Listener> listener = net.listen("fake://s", EndpointOptions{});
    std::unique_ptr<Connection> c = net.connect("fake://s", with_identity("w"));
    FakeFault drop;
    drop.type = MsgType::kPush;
    drop.probability = 0.5;
    net.add_fault(drop);
    for (std::int64_t step = 0; step < 64; ++step) c->send(push_header(0, step), Payload::floats(std::vector<float>{1.0f}));
    std::vector<std::int64_t> steps;
    while (auto env = listener->receive(milliseconds(0))) steps.push_back(env->message.header.step);
    return steps;
  };
  const std::vector<std::int64_t> a = survivors(5);
  CHECK(a == survivors(5));
  CHECK(a != survivors(6));
  CHECK(a.size() > 16);
  CHECK(a.size() < 48);
}

TEST_CASE("fake transport: bounded queues: a connection waits at most its send timeout, a listener never waits") {
  FakeTransport net(1);
  EndpointOptions lo;
  lo.socket.receive_hwm = 4;
  std::unique_ptr<Listener> listener = net.listen("fake://s", lo);
  EndpointOptions co = with_identity("w");
  co.socket.send_timeout = milliseconds(200);
  co.socket.receive_hwm = 2;
  std::unique_ptr<Connection> c = net.connect("fake://s", co);
  Header hb;
  hb.type = MsgType::kHeartbeat;
  for (int i = 0; i < 4; ++i) c->send(hb);
  const auto start = Clock::now();
  CHECK_THROWS_WITH_AS(c->send(hb), doctest::Contains("queue is full"), TransportError);
  CHECK(Clock::now() - start >= milliseconds(200));
  // The listener's replies: two fit the connection's queue, the third fails at once.
  listener->send(PeerId("w"), hb);
  listener->send(PeerId("w"), hb);
  const auto again = Clock::now();
  CHECK_THROWS_AS(listener->send(PeerId("w"), hb), TransportError);
  // Waiting would take the listener's send timeout (120 s by default); 10 s is
  // the margin for a loaded machine.
  CHECK(Clock::now() - again < std::chrono::seconds(10));
  // Reading makes room.
  CHECK(listener->receive(milliseconds(0)).has_value());
  CHECK_NOTHROW(c->send(hb));
}

TEST_CASE("fake transport: no CURVE, said clearly") {
  FakeTransport net;
  SecurityContext curve;
  curve.curve = true;
  Logger log("test", LogLevel::kError);
  CHECK_THROWS_WITH_AS(net.authenticate(&curve, log), doctest::Contains("no CURVE"), ConfigError);
  CHECK(net.authenticate(nullptr, log) == nullptr);
}
