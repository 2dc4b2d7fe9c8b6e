// common/transport/shm/shm_transport.h: tensors through shared memory after the hello,
// inline before it, when slots run out, when the listener says no; every bad
// thing a peer can send the layer (forged, replayed and stale descriptors,
// wrong frames, a hello from another host); and real processes killed with
// SIGKILL while the survivor holds their bytes (still readable, nothing left
// mapped afterwards). The generic cases over every transport are in
// transport_test.cc, whole clusters over shm in tests/cluster/cluster_test.cc.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <array>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <tuple>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/base/errors.h"
#include "common/transport/shm/shm_memfd.h"
#include "common/transport/shm/shm_segment.h"
#include "common/transport/shm/shm_transport.h"
#include "common/transport/zmq/zmq_socket.h"
#include "common/transport/zmq/zmq_transport.h"
#include "tests/common/shm_test_util.h"

using namespace pstrain;
using pstrain::test::Child;
using pstrain::test::our_mappings;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

namespace {

ShmTransportOptions small_options() {
  ShmTransportOptions o;
  o.segment.slots_per_side = 4;
  o.segment.slot_bytes = 1 << 16;  // 16,384 floats
  o.segment.name = "t";
  o.min_bytes = 1024;              // 256 floats
  return o;
}

EndpointOptions tensor_options(const std::string& identity) {
  EndpointOptions o;
  o.identity = identity;
  o.socket.send_timeout = milliseconds(2000);
  o.carries_tensors = true;
  return o;
}

Header push_header(std::int64_t key, std::int64_t step = 0) {
  Header h;
  h.type = MsgType::kPush;
  h.role = Role::kWorker;
  h.request_id = 7 + key;
  h.key = key;
  h.step = step;
  h.lr = 0.5;
  return h;
}

// A pull reply (it carries weights), or with `type` kPushReply an acknowledgement.
Header reply_to(const Header& request, MsgType type = MsgType::kPullReply) {
  Header r = request;
  r.type = type;
  r.role = Role::kServer;
  return r;
}

std::vector<float> values(std::size_t n, float seed) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = seed + static_cast<float>(i % 1000) * 0.25f;
  return v;
}

// A payload that owns its floats (inline payloads are zero-copy: the bytes
// must live until ZeroMQ has sent them).
Payload owned(std::vector<float> v) {
  auto held = std::make_shared<const std::vector<float>>(std::move(v));
  return Payload::floats(*held, held);
}

std::vector<float> floats_of(const Envelope& env) {
  std::vector<float> scratch;
  const std::span<const float> got = env.message.float_payload(scratch);
  return {got.begin(), got.end()};
}

// The shared-memory layer's tag frame: "PSTRSHM" and the kind.
zmq::message_t layer_tag(char kind) {
  zmq::message_t t(8);
  std::memcpy(t.data(), "PSTRSHM", 7);
  static_cast<char*>(t.data())[7] = kind;
  return t;
}

// The next message's frames on `socket` within 20 s (a ROUTER's start with the sender's id).
std::vector<zmq::message_t> next_frames(zmq::socket_t& socket) {
  zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
  REQUIRE(zmq::poll(&item, 1, milliseconds(20000)) == 1);
  std::vector<zmq::message_t> frames;
  while (true) {
    zmq::message_t f;
    REQUIRE(socket.recv(f));
    const bool more = f.more();
    frames.push_back(std::move(f));
    if (!more) break;
  }
  return frames;
}

// A segment a hand-driven peer says hello with: 2 slots a side of 64 KiB.
std::unique_ptr<ShmSegment> raw_segment() {
  ShmOptions so;
  so.slots_per_side = 2;
  so.slot_bytes = 1 << 16;
  so.name = "raw";
  return ShmSegment::create(so);
}

// A hand-driven peer: a raw DEALER socket speaking the layer's frames.
struct RawPeer {
  zmq::socket_t socket;
  RawPeer(zmq::context_t& ctx, const std::string& address, const std::string& identity)
      : socket(ctx, zmq::socket_type::dealer) {
    socket.set(zmq::sockopt::routing_id, identity);
    socket.set(zmq::sockopt::linger, 0);
    socket.connect(address);
  }
  void send(std::vector<zmq::message_t> frames) {
    for (std::size_t i = 0; i < frames.size(); ++i) {
      REQUIRE(socket.send(frames[i], i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none));
    }
  }
  // [address, boot id] as a hello's second frame.
  void hello(const ShmAddress& address, const std::string& boot_id) {
    const auto a = encode_shm_address(address);
    std::string body(reinterpret_cast<const char*>(a.data()), a.size());
    body += boot_id;
    std::vector<zmq::message_t> frames;
    frames.push_back(layer_tag('H'));
    frames.emplace_back(body.data(), body.size());
    send(std::move(frames));
  }
  void data(const Header& header, const ShmDescriptor& d) {
    const auto bytes = encode_shm_descriptor(d);
    std::vector<zmq::message_t> frames;
    frames.push_back(layer_tag('D'));
    frames.push_back(to_message(encode_header(header)));
    frames.emplace_back(bytes.data(), bytes.size());
    send(std::move(frames));
  }
  bool readable() {
    zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
    return zmq::poll(&item, 1, milliseconds(0)) == 1;
  }
  std::vector<zmq::message_t> receive() { return next_frames(socket); }
};

// Receives on `listener` until a message comes or 20 s pass (the layer's own
// messages make a receive return nothing now and then; a loaded machine can
// be slow to connect).
std::optional<Envelope> next(Listener& listener, PeerId* from = nullptr) {
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (Clock::now() < deadline) {
    if (auto env = listener.receive(milliseconds(100), from)) return env;
  }
  return std::nullopt;
}
std::optional<Envelope> next(Connection& conn) {
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (Clock::now() < deadline) {
    if (auto env = conn.receive(milliseconds(100))) return env;
  }
  return std::nullopt;
}

// Lets `listener` answer what `raw` sent (a hello): receives until the answer
// is there (20 s at most); the layer's own messages give the caller nothing.
void let_answer(Listener& listener, RawPeer& raw) {
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (!raw.readable() && Clock::now() < deadline) CHECK_FALSE(listener.receive(milliseconds(50)).has_value());
}

// One push and its reply, so the connection has heard the listener's yes or no.
void handshake(Listener& listener, Connection& conn) {
  conn.send(push_header(0), owned(values(4, 0.0f)));
  std::optional<Envelope> got = next(listener);
  REQUIRE(got);
  listener.send(got->from, reply_to(got->message.header, MsgType::kPushReply));
  REQUIRE(next(conn));
}

}  // namespace

TEST_CASE("shm transport: after the hello, pushes and replies go through slots both ways, byte for byte") {
  zmq::context_t ctx;
  ShmTransport t(ctx, small_options());
  std::unique_ptr<Listener> listener = t.listen("tcp://127.0.0.1:*", EndpointOptions{});
  std::unique_ptr<Connection> conn = t.connect(listener->address(), tensor_options("w1"));
  handshake(*listener, *conn);
  CHECK(t.stats().accepted == 1);
  const ShmTransport::Stats before = t.stats();

  const std::vector<float> grad = values(10000, 1.0f);  // 40,000 bytes: a slot
  conn->send(push_header(3), Payload::floats(grad));
  std::optional<Envelope> push = next(*listener);
  REQUIRE(push);
  CHECK(push->from.bytes() == "w1");
  CHECK(push->message.header.num_elems == 10000);
  CHECK(floats_of(*push) == grad);
  const std::vector<float> weights = values(16000, -3.0f);  // 64,000 bytes: still one slot
  listener->send(push->from, reply_to(push->message.header), Payload::floats(weights));
  std::optional<Envelope> pulled = next(*conn);
  REQUIRE(pulled);
  std::vector<float> into(16000);
  pulled->message.copy_floats_to(into);  // receive into place, straight out of the slot
  CHECK(into == weights);
  CHECK(t.stats().shm_bodies == before.shm_bodies + 2);

  // Under min_bytes, and over a slot: inline, and still right.
  const std::vector<float> tiny = values(100, 2.0f), huge = values(20000, 5.0f);
  conn->send(push_header(4), Payload::floats(tiny));
  conn->send(push_header(5), Payload::floats(huge));
  std::optional<Envelope> a = next(*listener), b = next(*listener);
  REQUIRE(a);
  REQUIRE(b);
  CHECK(floats_of(*a) == tiny);
  CHECK(floats_of(*b) == huge);
  CHECK(t.stats().shm_bodies == before.shm_bodies + 2);
  CHECK(t.stats().inline_bodies == before.inline_bodies + 2);

  // bfloat16 payloads take the same path.
  std::vector<std::uint16_t> half(5000);
  for (std::size_t i = 0; i < half.size(); ++i) half[i] = static_cast<std::uint16_t>(0x3f80 + (i % 64));
  conn->send(push_header(6), Payload::bfloat16(half));
  std::optional<Envelope> h = next(*listener);
  REQUIRE(h);
  CHECK(h->message.header.dtype == DType::kBFloat16);
  CHECK(std::memcmp(h->message.payload.data(), half.data(), half.size() * 2) == 0);
  CHECK(t.stats().shm_bodies == before.shm_bodies + 3);
}

TEST_CASE("shm transport: with every slot in flight the next bodies go inline; dropped messages give their slots back") {
  zmq::context_t ctx;
  ShmTransport t(ctx, small_options());
  std::unique_ptr<Listener> listener = t.listen("tcp://127.0.0.1:*", EndpointOptions{});
  std::unique_ptr<Connection> conn = t.connect(listener->address(), tensor_options("w2"));
  handshake(*listener, *conn);
  const ShmTransport::Stats before = t.stats();
  std::vector<std::vector<float>> sent;  // kept alive: inline payloads are zero-copy
  for (int i = 0; i < 6; ++i) sent.push_back(values(1000, static_cast<float>(i)));
  for (int i = 0; i < 6; ++i) conn->send(push_header(i), Payload::floats(sent[static_cast<std::size_t>(i)]));
  std::vector<Envelope> held;
  for (int i = 0; i < 6; ++i) {
    std::optional<Envelope> got = next(*listener);
    REQUIRE(got);
    CHECK(floats_of(*got) == values(1000, static_cast<float>(got->message.header.key)));
    held.push_back(std::move(*got));
  }
  ShmTransport::Stats s = t.stats();
  CHECK(s.shm_bodies == before.shm_bodies + 4);
  CHECK(s.no_free_slot == before.no_free_slot + 2);
  held.clear();  // releases the four slots
  const std::vector<float> more = values(1000, 9.0f);
  for (int i = 0; i < 4; ++i) conn->send(push_header(10 + i), Payload::floats(more));
  for (int i = 0; i < 4; ++i) REQUIRE(next(*listener));
  s = t.stats();
  CHECK(s.shm_bodies == before.shm_bodies + 8);
  CHECK(s.no_free_slot == before.no_free_slot + 2);
}

TEST_CASE("shm transport: forged, replayed and malformed layer messages are ProtocolErrors naming the sender; the listener goes on") {
  zmq::context_t ctx;
  ShmTransport t(ctx, small_options());
  std::unique_ptr<Listener> listener = t.listen("tcp://127.0.0.1:*", EndpointOptions{});
  // A peer that does the hello by hand with a segment of its own.
  std::unique_ptr<ShmSegment> segment = raw_segment();
  RawPeer evil(ctx, listener->address(), "evil");
  evil.hello(segment->address(), t.boot_id());
  let_answer(*listener, evil);  // the hello is the layer's own: nothing for the caller
  std::vector<zmq::message_t> yes = evil.receive();
  REQUIRE(yes.size() == 1);
  CHECK(yes[0].to_string() == "PSTRSHMA");

  const auto expect_refused = [&](const std::string& what) {
    PeerId from;
    CHECK_THROWS_WITH_AS(next(*listener, &from), doctest::Contains(what.c_str()), ProtocolError);
    CHECK(from.bytes() == "evil");
  };
  // A legitimate one first: published, sent, read in place.
  std::vector<float> grad = values(500, 1.0f);
  Header h = push_header(1);
  h.dtype = DType::kFloat32;
  h.num_elems = 500;
  ShmSegment::WriteSlot slot = segment->acquire(milliseconds(1000));
  std::memcpy(slot.bytes().data(), grad.data(), grad.size() * 4);
  const ShmDescriptor good = slot.publish(grad.size() * 4);
  evil.data(h, good);
  {
    std::optional<Envelope> got = next(*listener);
    REQUIRE(got);
    CHECK(floats_of(*got) == grad);
  }  // dropped: the slot is free again
  evil.data(h, good);  // replayed
  expect_refused("not published");
  ShmDescriptor other = good;
  other.segment_id ^= 1;
  evil.data(h, other);
  expect_refused("names segment");
  ShmDescriptor theirs = good;
  theirs.slot = 2;  // one the listener writes
  evil.data(h, theirs);
  expect_refused("not a slot the peer writes");
  ShmDescriptor beyond = good;
  beyond.offset = 1 << 16;
  evil.data(h, beyond);
  expect_refused("outside the slot");
  {
    std::vector<zmq::message_t> two;
    two.push_back(layer_tag('D'));
    two.push_back(to_message(encode_header(h)));
    evil.send(std::move(two));
    expect_refused("2 frames");
    std::vector<zmq::message_t> odd;
    odd.push_back(layer_tag('Z'));
    evil.send(std::move(odd));
    expect_refused("unknown kind");
    std::vector<zmq::message_t> short_desc;
    short_desc.push_back(layer_tag('D'));
    short_desc.push_back(to_message(encode_header(h)));
    short_desc.emplace_back("12345", 5);
    evil.send(std::move(short_desc));
    expect_refused("descriptor of 5 bytes");
  }
  // The header still goes through decode_message: a descriptor whose bytes do
  // not match the header's element count.
  ShmSegment::WriteSlot slot2 = segment->acquire(milliseconds(1000));
  const ShmDescriptor wrong_size = slot2.publish(100);
  evil.data(h, wrong_size);
  expect_refused("payload");
  // A descriptor from a peer that never said hello: dropped, and told no.
  RawPeer stranger(ctx, listener->address(), "stranger");
  stranger.data(h, good);
  let_answer(*listener, stranger);
  std::vector<zmq::message_t> no = stranger.receive();
  REQUIRE(no.size() == 2);
  CHECK(no[0].to_string() == "PSTRSHMR");
  CHECK(no[1].to_string().find("no shared-memory segment for this connection") != std::string::npos);
  CHECK(t.stats().orphan_descriptors == 1);
  // A second hello from the same connection replaces its segment: the old one's descriptors no longer open.
  std::unique_ptr<ShmSegment> second = raw_segment();
  evil.hello(second->address(), t.boot_id());
  let_answer(*listener, evil);
  yes = evil.receive();
  REQUIRE(yes.size() == 1);
  CHECK(yes[0].to_string() == "PSTRSHMA");
  ShmSegment::WriteSlot old_slot = segment->acquire(milliseconds(1000));
  const ShmDescriptor stale_segment = old_slot.publish(grad.size() * 4);
  evil.data(h, stale_segment);
  expect_refused("names segment");
  // And the listener serves a well-behaved connection as before.
  std::unique_ptr<Connection> conn = t.connect(listener->address(), tensor_options("good"));
  handshake(*listener, *conn);
  conn->send(push_header(8), Payload::floats(grad));
  std::optional<Envelope> ok = next(*listener);
  REQUIRE(ok);
  CHECK(floats_of(*ok) == grad);
}

TEST_CASE("shm transport: a hello from another host, with a bad address, not a memfd or too big gets no; a refused connection works inline") {
  zmq::context_t ctx;
  ShmTransport t(ctx, small_options());
  std::unique_ptr<Listener> listener = t.listen("tcp://127.0.0.1:*", EndpointOptions{});
  RawPeer far(ctx, listener->address(), "far");
  ShmOptions so;
  so.slots_per_side = 1;
  so.slot_bytes = 4096;
  std::unique_ptr<ShmSegment> segment = ShmSegment::create(so);
  far.hello(segment->address(), "another-boot-id");
  let_answer(*listener, far);
  std::vector<zmq::message_t> no = far.receive();
  REQUIRE(no.size() == 2);
  CHECK(no[0].to_string() == "PSTRSHMR");
  CHECK(no[1].to_string().find("another host") != std::string::npos);
  ShmAddress bogus = segment->address();
  bogus.fd = 9999;
  far.hello(bogus, t.boot_id());
  let_answer(*listener, far);
  no = far.receive();
  REQUIRE(no.size() == 2);
  CHECK(no[0].to_string() == "PSTRSHMR");
  CHECK_FALSE(no[1].to_string().empty());
  // Any descriptor of this process that its memfd share does not offer (here:
  // its standard input) is never handed out.
  ShmAddress not_memfd = segment->address();
  not_memfd.fd = 0;
  far.hello(not_memfd, t.boot_id());
  let_answer(*listener, far);
  no = far.receive();
  REQUIRE(no.size() == 2);
  CHECK(no[1].to_string().find("on offer here") != std::string::npos);
  // A segment far bigger than this job's (the listener would map it whole).
  ShmOptions huge;
  huge.slots_per_side = 64;
  huge.slot_bytes = 1 << 20;
  huge.populate = false;
  std::unique_ptr<ShmSegment> big = ShmSegment::create(huge);
  far.hello(big->address(), t.boot_id());
  let_answer(*listener, far);
  no = far.receive();
  REQUIRE(no.size() == 2);
  CHECK(no[1].to_string().find("over this job's") != std::string::npos);
  CHECK(t.stats().refused == 4);
  CHECK(t.stats().accepted == 0);

  // A listener that takes no segments (max_segments 0): its connections go inline.
  ShmTransportOptions full = small_options();
  full.max_segments = 0;
  ShmTransport t2(ctx, full);
  std::unique_ptr<Listener> l2 = t2.listen("tcp://127.0.0.1:*", EndpointOptions{});
  std::unique_ptr<Connection> conn = t2.connect(l2->address(), tensor_options("w3"));
  handshake(*l2, *conn);
  CHECK(t2.stats().refused == 1);
  const std::vector<float> grad = values(5000, 4.0f);
  conn->send(push_header(1), Payload::floats(grad));
  std::optional<Envelope> got = next(*l2);
  REQUIRE(got);
  CHECK(floats_of(*got) == grad);
  l2->send(got->from, reply_to(got->message.header), Payload::floats(grad));
  std::optional<Envelope> back = next(*conn);
  REQUIRE(back);
  CHECK(floats_of(*back) == grad);
  CHECK(t2.stats().shm_bodies == 0);
}

TEST_CASE("shm transport: a listener restarted at the same address: descriptors sent to it are dropped, the connection told no, then inline") {
  zmq::context_t ctx;
  ShmTransport t(ctx, small_options());
  const std::string address = "ipc:///tmp/pstrain-shm-restart-" + std::to_string(getpid());
  auto listener = t.listen(address, EndpointOptions{});
  std::unique_ptr<Connection> conn = t.connect(address, tensor_options("w9"));
  handshake(*listener, *conn);
  listener.reset();  // the server dies; a new one comes up where it was
  listener = t.listen(address, EndpointOptions{});
  const std::vector<float> lost = values(3000, 1.0f), kept = values(3000, 2.0f);
  // Through the old segment: the new listener cannot read it. (One sent while
  // ZeroMQ still took the old connection for alive is lost outright, as in a
  // real restart: so push until the new listener has seen one.)
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (t.stats().orphan_descriptors == 0 && Clock::now() < deadline) {
    conn->send(push_header(1), Payload::floats(lost));
    CHECK_FALSE(listener->receive(milliseconds(100)).has_value());
  }
  CHECK(t.stats().orphan_descriptors >= 1);
  while (t.stats().noes_heard == 0 && Clock::now() < deadline) {
    CHECK_FALSE(conn->receive(milliseconds(50)).has_value());  // takes the no
  }
  REQUIRE(t.stats().noes_heard >= 1);
  const std::uint64_t through_slots = t.stats().shm_bodies;
  conn->send(push_header(2), Payload::floats(kept));
  std::optional<Envelope> got = next(*listener);
  REQUIRE(got);
  CHECK(got->message.header.key == 2);
  CHECK(floats_of(*got) == kept);
  CHECK(t.stats().shm_bodies == through_slots);  // inline now
}

namespace {

// A child process (forked before the parent makes any ZeroMQ context) that
// connects to `address`, does the handshake, pushes `n` floats through its
// segment, tells the parent (1 = went through shared memory) and waits to be killed.
void pushing_child(const std::string& address, std::size_t n, int to_parent) {
  zmq::context_t ctx;
  ShmTransport t(ctx, small_options());
  std::unique_ptr<Connection> conn = t.connect(address, tensor_options("child"));
  conn->send(push_header(0), owned(values(4, 0.0f)));
  if (!next(*conn)) throw Error("no reply to the handshake");
  conn->send(push_header(1), owned(values(n, 7.0f)));
  const char ok = t.stats().shm_bodies == 1 ? '1' : '0';
  if (::write(to_parent, &ok, 1) != 1) throw Error("pipe");
  pause();
}

// A child that listens at `address`, answers the first push (a handshake),
// replies to the second with `n` floats through shared memory, tells the
// parent and waits to be killed.
void replying_child(const std::string& address, std::size_t n, int to_parent) {
  zmq::context_t ctx;
  ShmTransport t(ctx, small_options());
  std::unique_ptr<Listener> listener = t.listen(address, EndpointOptions{});
  std::optional<Envelope> first = next(*listener);
  if (!first) throw Error("no handshake");
  listener->send(first->from, reply_to(first->message.header, MsgType::kPushReply));
  std::optional<Envelope> second = next(*listener);
  if (!second) throw Error("no second push");
  listener->send(second->from, reply_to(second->message.header), owned(values(n, -7.0f)));
  const char ok = t.stats().shm_bodies == 1 ? '1' : '0';
  if (::write(to_parent, &ok, 1) != 1) throw Error("pipe");
  pause();
}

std::string ipc_address(const char* what) {
  return "ipc:///tmp/pstrain-shm-transport-test-" + std::to_string(getpid()) + "-" + what;
}

}  // namespace

TEST_CASE("shm transport: a worker killed (SIGKILL) while the server holds its push: bytes still readable, nothing left mapped") {
  REQUIRE(our_mappings() == 0);
  const std::string address = ipc_address("worker-killed");
  Child child([&](int fd) { pushing_child(address, 12000, fd); });
  zmq::context_t ctx;
  ShmTransport t(ctx, small_options());
  std::unique_ptr<Listener> listener = t.listen(address, EndpointOptions{});
  std::optional<Envelope> first = next(*listener);
  REQUIRE(first);
  listener->send(first->from, reply_to(first->message.header, MsgType::kPushReply));
  std::optional<Envelope> push = next(*listener);
  REQUIRE(push);
  CHECK(child.read(1)[0] == std::byte{'1'});
  child.kill_and_reap();
  // The dead worker's bytes stay mapped while held, and are what it sent.
  CHECK(floats_of(*push) == values(12000, 7.0f));
  CHECK(our_mappings() >= 1);
  // A reply to it is refused at once or dropped by ZeroMQ; never a hang, never a crash.
  const auto start = Clock::now();
  try {
    for (int i = 0; i < 20; ++i) {
      listener->send(push->from, reply_to(push->message.header), owned(values(12000, 1.0f)));
      std::this_thread::sleep_for(milliseconds(50));
    }
  } catch (const TransportError&) {
  }
  CHECK(Clock::now() - start < std::chrono::seconds(5));
  push.reset();  // releases the slot in the dead process's segment
  // The next hello sweeps the dead peer's segment away: only the new
  // connection's two mappings (its own, the listener's) remain.
  {
    std::unique_ptr<Connection> conn = t.connect(address, tensor_options("fresh"));
    handshake(*listener, *conn);
    CHECK(our_mappings() == 2);
    conn->send(push_header(2), owned(values(3000, 2.0f)));
    std::optional<Envelope> got = next(*listener);
    REQUIRE(got);
    CHECK(floats_of(*got) == values(3000, 2.0f));
  }
  listener.reset();
  CHECK(our_mappings() == 0);
}

TEST_CASE("shm transport: a server killed (SIGKILL) while the worker holds its reply: bytes still readable, nothing left mapped") {
  REQUIRE(our_mappings() == 0);
  const std::string address = ipc_address("server-killed");
  Child child([&](int fd) { replying_child(address, 15000, fd); });
  zmq::context_t ctx;
  ShmTransport t(ctx, small_options());
  std::unique_ptr<Connection> conn = t.connect(address, tensor_options("parent"));
  conn->send(push_header(0), owned(values(4, 0.0f)));
  REQUIRE(next(*conn));
  conn->send(push_header(1), owned(values(10, 0.0f)));
  std::optional<Envelope> reply = next(*conn);
  REQUIRE(reply);
  CHECK(child.read(1)[0] == std::byte{'1'});
  child.kill_and_reap();
  std::vector<float> into(15000);
  reply->message.copy_floats_to(into);
  CHECK(into == values(15000, -7.0f));
  reply.reset();
  // Sends to the dead server do not wait on shared memory (ZeroMQ queues or refuses them).
  const auto start = Clock::now();
  try {
    for (int i = 0; i < 8; ++i) conn->send(push_header(2 + i), owned(values(5000, 1.0f)));
  } catch (const TransportError&) {
  }
  CHECK(Clock::now() - start < std::chrono::seconds(5));
  conn->abandon();
  conn.reset();
  CHECK(our_mappings() == 0);
}

// ---------------------------------------------------------------------------
// Arenas: bodies sent from allocate_send_floats() memory, read in place.

namespace {

void offer_arena(RawPeer& peer, const ShmAddress& address) {
  const auto a = encode_shm_address(address);
  std::vector<zmq::message_t> frames;
  frames.push_back(layer_tag('G'));
  frames.emplace_back(a.data(), a.size());
  peer.send(std::move(frames));
}

void arena_data(RawPeer& peer, const Header& header, const ShmArenaDescriptor& d) {
  const auto bytes = encode_shm_arena_descriptor(d);
  std::vector<zmq::message_t> frames;
  frames.push_back(layer_tag('P'));
  frames.push_back(to_message(encode_header(header)));
  frames.emplace_back(bytes.data(), bytes.size());
  peer.send(std::move(frames));
}

// The permissions ("r--s", "rw-s") of this process's mapping holding `p`, or "".
std::string mapping_permissions(const void* p) {
  std::ifstream maps("/proc/self/maps");
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  for (std::string line; std::getline(maps, line);) {
    std::uintptr_t begin = 0, end = 0;
    char perms[8] = {};
    if (std::sscanf(line.c_str(), "%lx-%lx %7s", &begin, &end, perms) == 3 && at >= begin && at < end) return perms;
  }
  return {};
}

// The answer to an arena offer: 'B' + id (yes), or 'N' + id + reason.
std::pair<char, std::string> arena_answer(Listener& listener, RawPeer& peer) {
  let_answer(listener, peer);
  std::vector<zmq::message_t> answer = peer.receive();
  REQUIRE(answer.size() == 2);
  REQUIRE(answer[0].size() == 8);
  REQUIRE(answer[1].size() >= 8);
  return {static_cast<const char*>(answer[0].data())[7], answer[1].to_string().substr(8)};
}

}  // namespace

TEST_CASE("shm transport: bodies in an arena go as descriptors after the listener's yes, read in place through a read-only mapping") {
  zmq::context_t ctx;
  ShmTransport t(ctx, small_options());
  std::unique_ptr<Listener> listener = t.listen("tcp://127.0.0.1:*", EndpointOptions{});
  std::unique_ptr<Connection> conn = t.connect(listener->address(), tensor_options("w1"));
  handshake(*listener, *conn);
  const SendFloats grads = t.allocate_send_floats(40000);  // more than a slot holds
  REQUIRE(grads.values.size() == 40000);
  CHECK(std::all_of(grads.values.begin(), grads.values.end(), [](float x) { return x == 0.0f; }));
  const std::vector<float> first = values(40000, 1.0f);
  std::copy(first.begin(), first.end(), grads.values.begin());
  CHECK(t.arena_holding(grads.values.data(), 40000 * 4) != nullptr);
  CHECK(t.arena_holding(grads.values.data(), (std::size_t{64} << 20) + 1) == nullptr);  // past the first arena's end
  CHECK(t.arena_holding(first.data(), 4) == nullptr);

  // The first body from it offers the arena and goes through a slot (it fits one).
  const std::span<const float> part = grads.values.subspan(100, 10000);
  conn->send(push_header(1), Payload::floats(part));
  std::optional<Envelope> got = next(*listener);
  REQUIRE(got);
  CHECK(floats_of(*got) == std::vector<float>(part.begin(), part.end()));
  CHECK(t.stats().arenas_accepted == 1);
  CHECK(t.stats().arena_bodies == 0);
  listener->send(got->from, reply_to(got->message.header, MsgType::kPushReply));
  REQUIRE(next(*conn));  // the yes came before this reply

  // Now descriptors: a body too big for any slot, and a small part, read in place.
  const ShmTransport::Stats before = t.stats();
  conn->send(push_header(2), Payload::floats(grads.values));
  conn->send(push_header(3), Payload::floats(part));
  std::optional<Envelope> whole = next(*listener), small = next(*listener);
  REQUIRE(whole);
  REQUIRE(small);
  CHECK(floats_of(*whole) == first);
  CHECK(floats_of(*small) == std::vector<float>(part.begin(), part.end()));
  CHECK(t.stats().arena_bodies == before.arena_bodies + 2);
  CHECK(t.stats().shm_bodies == before.shm_bodies);
  CHECK(t.stats().inline_bodies == before.inline_bodies);
  // The listener's bytes are its own mapping of the arena, and it can only read them.
  const void* seen = whole->message.payload.data();
  CHECK(seen != static_cast<const void*>(grads.values.data()));
  CHECK(mapping_permissions(seen) == "r--s");
  CHECK(mapping_permissions(grads.values.data()) == "rw-s");
  // In place: what the owner writes (here, after the reply it waits for) is what the next descriptor shows.
  grads.values[7] = -42.0f;
  conn->send(push_header(4), Payload::floats(grads.values.subspan(0, 1000)));
  std::optional<Envelope> again = next(*listener);
  REQUIRE(again);
  CHECK(floats_of(*again)[7] == -42.0f);
  CHECK(t.stats().arena_bodies == before.arena_bodies + 3);
  // Ordinary memory still goes through slots.
  const std::vector<float> plain = values(5000, 3.0f);
  conn->send(push_header(5), Payload::floats(plain));
  std::optional<Envelope> slot = next(*listener);
  REQUIRE(slot);
  CHECK(floats_of(*slot) == plain);
  CHECK(t.stats().shm_bodies == before.shm_bodies + 1);
}

TEST_CASE("shm transport: a connection told no keeps sending arena bodies through slots or inline; ordinary transports give ordinary memory") {
  zmq::context_t ctx;
  ShmTransport t(ctx, small_options());
  std::unique_ptr<Listener> listener = t.listen("tcp://127.0.0.1:*", EndpointOptions{});
  // No hello at all (not a tensor connection): the arena is never offered.
  EndpointOptions plain = tensor_options("plain");
  plain.carries_tensors = false;
  std::unique_ptr<Connection> conn = t.connect(listener->address(), plain);
  const SendFloats grads = t.allocate_send_floats(2000);
  std::fill(grads.values.begin(), grads.values.end(), 2.5f);
  for (int i = 0; i < 3; ++i) {
    conn->send(push_header(i), Payload::floats(grads.values));
    std::optional<Envelope> got = next(*listener);
    REQUIRE(got);
    CHECK(floats_of(*got) == std::vector<float>(2000, 2.5f));
    listener->send(got->from, reply_to(got->message.header, MsgType::kPushReply));
    REQUIRE(next(*conn));
  }
  CHECK(t.stats().arena_bodies == 0);
  CHECK(t.stats().arenas_accepted + t.stats().arenas_refused == 0);
  // ZeroMQ's transport hands out ordinary, zeroed memory.
  ZmqTransport z(ctx);
  const SendFloats ordinary = z.allocate_send_floats(1000);
  REQUIRE(ordinary.values.size() == 1000);
  CHECK(std::all_of(ordinary.values.begin(), ordinary.values.end(), [](float x) { return x == 0.0f; }));
  CHECK(mapping_permissions(ordinary.values.data()).find('s') == std::string::npos);
}

TEST_CASE("shm transport: forged arena offers and descriptors get a no or a ProtocolError naming the sender; the listener goes on") {
  zmq::context_t ctx;
  ShmTransport t(ctx, small_options());
  std::unique_ptr<Listener> listener = t.listen("tcp://127.0.0.1:*", EndpointOptions{});
  std::unique_ptr<ShmSegment> segment = raw_segment();
  std::unique_ptr<ShmArena> arena = ShmArena::create(1 << 16);
  auto* floats = reinterpret_cast<float*>(arena->data());
  for (int i = 0; i < 1000; ++i) floats[i] = static_cast<float>(i);

  // An offer before any hello (no segment here: not known to be on this host).
  RawPeer early(ctx, listener->address(), "early");
  offer_arena(early, arena->address());
  auto [kind, reason] = arena_answer(*listener, early);
  CHECK(kind == 'N');
  CHECK(reason.find("no segment here") != std::string::npos);

  RawPeer evil(ctx, listener->address(), "evil");
  evil.hello(segment->address(), t.boot_id());
  let_answer(*listener, evil);
  REQUIRE(evil.receive().size() == 1);  // yes
  const auto refused_offer = [&](const ShmAddress& address, const std::string& why) {
    offer_arena(evil, address);
    auto [k, r] = arena_answer(*listener, evil);
    CHECK(k == 'N');
    CAPTURE(r);
    CHECK(r.find(why) != std::string::npos);
  };
  ShmAddress a = arena->address();
  a.bytes += 4096;
  refused_offer(a, "its size is");
  const std::unique_ptr<ShmSegment> unattached = raw_segment();
  refused_offer(unattached->address(), "not a pstrain arena");  // a memfd of ours, but a segment
  refused_offer(segment->address(), "on offer here");  // handed out already, to its one peer
  a = arena->address();
  a.segment_id ^= 1;
  refused_offer(a, "on offer here");
  a = arena->address();
  a.fd = 0;  // stdin: never on offer
  refused_offer(a, "on offer here");
  {
    std::vector<zmq::message_t> frames;
    frames.push_back(layer_tag('G'));
    frames.emplace_back("short", 5);
    evil.send(std::move(frames));
    auto [k, r] = arena_answer(*listener, evil);
    CHECK(k == 'N');
    CHECK(r.find("malformed arena offer") != std::string::npos);
  }
  // A good offer: yes with its id.
  offer_arena(evil, arena->address());
  std::tie(kind, reason) = arena_answer(*listener, evil);
  CHECK(kind == 'B');

  const auto expect_refused = [&](const std::string& what) {
    PeerId from;
    CHECK_THROWS_WITH_AS(next(*listener, &from), doctest::Contains(what.c_str()), ProtocolError);
    CHECK(from.bytes() == "evil");
  };
  Header h = push_header(1);
  h.dtype = DType::kFloat32;
  h.num_elems = 1000;
  arena_data(evil, h, {arena->id(), 0, 4000});
  {
    std::optional<Envelope> got = next(*listener);
    REQUIRE(got);
    CHECK(floats_of(*got) == std::vector<float>(floats, floats + 1000));
  }
  arena_data(evil, h, {arena->id(), (1 << 16) - 3996, 4000});
  expect_refused("lie outside");
  arena_data(evil, h, {arena->id(), ~std::uint64_t{0} - 10, 4000});  // offset + length overflows
  expect_refused("lie outside");
  arena_data(evil, h, {arena->id(), 0, 400});  // the header says 1000 floats
  expect_refused("payload");
  {
    std::vector<zmq::message_t> frames;
    frames.push_back(layer_tag('P'));
    frames.push_back(to_message(encode_header(h)));
    frames.emplace_back("123", 3);
    evil.send(std::move(frames));
    expect_refused("arena descriptor of 3 bytes");
    std::vector<zmq::message_t> two;
    two.push_back(layer_tag('P'));
    two.push_back(to_message(encode_header(h)));
    evil.send(std::move(two));
    expect_refused("2 frames");
  }
  // An arena id the listener never attached: dropped, and the connection told no (it goes inline).
  const std::uint64_t orphans = t.stats().orphan_descriptors;
  arena_data(evil, h, {arena->id() ^ 7, 0, 4000});
  let_answer(*listener, evil);
  std::vector<zmq::message_t> no = evil.receive();
  REQUIRE(no.size() == 2);
  CHECK(no[0].to_string() == "PSTRSHMR");
  CHECK(no[1].to_string().find("no shared-memory arena of that id") != std::string::npos);
  CHECK(t.stats().orphan_descriptors == orphans + 1);
  // It lost its segment and arenas here with that no: its old arena's descriptors no longer open.
  arena_data(evil, h, {arena->id(), 0, 4000});
  let_answer(*listener, evil);
  CHECK(evil.receive()[0].to_string() == "PSTRSHMR");
  // More than 8 arenas from one connection: no.
  RawPeer greedy(ctx, listener->address(), "greedy");
  std::unique_ptr<ShmSegment> greedy_segment = raw_segment();
  greedy.hello(greedy_segment->address(), t.boot_id());
  let_answer(*listener, greedy);
  REQUIRE(greedy.receive().size() == 1);
  std::vector<std::unique_ptr<ShmArena>> many;
  for (int i = 0; i < 9; ++i) {
    many.push_back(ShmArena::create(4096));
    offer_arena(greedy, many.back()->address());
    auto [k, r] = arena_answer(*listener, greedy);
    CHECK(k == (i < 8 ? 'B' : 'N'));
    if (i == 8) CHECK(r.find("already has 8 arenas") != std::string::npos);
  }
  // And the listener serves a well-behaved connection as before, arena and all.
  std::unique_ptr<Connection> conn = t.connect(listener->address(), tensor_options("good"));
  handshake(*listener, *conn);
  const SendFloats grads = t.allocate_send_floats(3000);
  std::fill(grads.values.begin(), grads.values.end(), 4.0f);
  for (int i = 0; i < 2; ++i) {
    conn->send(push_header(10 + i), Payload::floats(grads.values));
    std::optional<Envelope> got = next(*listener);
    REQUIRE(got);
    CHECK(floats_of(*got) == std::vector<float>(3000, 4.0f));
    listener->send(got->from, reply_to(got->message.header, MsgType::kPushReply));
    REQUIRE(next(*conn));
  }
  CHECK(t.stats().arena_bodies >= 1);
}

TEST_CASE("shm arena: read-only attach checks the memfd; the peer's mapping cannot write; nothing left mapped") {
  REQUIRE(our_mappings() == 0);
  {
    std::unique_ptr<ShmArena> arena = ShmArena::create(10000);
    CHECK(arena->size() == 12288);  // whole pages
    std::memset(arena->data(), 0x5a, arena->size());
    std::unique_ptr<ShmArena> peer = ShmArena::attach_read_only(arena->address());
    CHECK(peer->id() == arena->id());
    CHECK(peer->size() == arena->size());
    CHECK(std::to_integer<int>(peer->data()[12287]) == 0x5a);
    CHECK(mapping_permissions(peer->data()) == "r--s");
    CHECK(peer->range(12000, 288).size() == 288);
    CHECK_THROWS_AS(peer->range(12000, 289), ProtocolError);
    CHECK(peer->holds(peer->data(), 12288));
    CHECK_FALSE(peer->holds(peer->data() + 1, 12288));
    CHECK_FALSE(peer->holds(peer->data() - 1, 1));
    CHECK(our_mappings() == 2);
    // A write through the peer's mapping faults (in a child, which dies of it).
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      std::signal(SIGSEGV, SIG_DFL);  // not doctest's handler: the child just dies of it
      const_cast<volatile std::byte*>(peer->data())[0] = std::byte{1};
      _exit(0);
    }
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGSEGV);
    CHECK(std::to_integer<int>(arena->data()[0]) == 0x5a);
    // Whoever gets the arena's descriptor from its share gets it read-only,
    // and even reopened read-write it can be neither mapped writable nor
    // written (sealed: F_SEAL_FUTURE_WRITE); the creator's mapping still is.
    const int given = shm_detail::receive_memfd(arena->address(), "test");
    REQUIRE(given >= 0);
    CHECK((fcntl(given, F_GETFL) & O_ACCMODE) == O_RDONLY);
    CHECK((fcntl(given, F_GET_SEALS) & shm_detail::kFutureWriteSeal) != 0);
    const int reopened = ::open(("/proc/self/fd/" + std::to_string(given)).c_str(), O_RDWR | O_CLOEXEC);
    if (reopened >= 0) {
      CHECK(mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, reopened, 0) == MAP_FAILED);
      CHECK(errno == EPERM);
      const char byte = 1;
      CHECK(::pwrite(reopened, &byte, 1, 4096) < 0);
      ::close(reopened);
    }
    ::close(given);
    arena->data()[0] = std::byte{0x5b};
    CHECK(std::to_integer<int>(peer->data()[0]) == 0x5b);
    CHECK_THROWS_AS(ShmArena::create(0), ConfigError);
  }
  CHECK(our_mappings() == 0);
}

namespace {

// A child that pushes `n` floats from an arena: first with the offer (through
// a slot), then, once the listener's yes is in, as an arena descriptor; tells
// the parent (1 = the second went as a descriptor) and waits to be killed.
void arena_pushing_child(const std::string& address, std::size_t n, int to_parent) {
  zmq::context_t ctx;
  ShmTransport t(ctx, small_options());
  std::unique_ptr<Connection> conn = t.connect(address, tensor_options("child"));
  const SendFloats grads = t.allocate_send_floats(n);
  const std::vector<float> v = values(n, 7.0f);
  std::copy(v.begin(), v.end(), grads.values.begin());
  conn->send(push_header(0), owned(values(4, 0.0f)));  // the handshake: the hello's yes comes before its reply
  if (!next(*conn)) throw Error("no reply to the handshake");
  conn->send(push_header(1), Payload::floats(grads.values.subspan(0, 4000)));  // offers the arena
  if (!next(*conn)) throw Error("no reply to the first push");
  conn->send(push_header(2), Payload::floats(grads.values));
  const char ok = t.stats().arena_bodies == 1 ? '1' : '0';
  if (::write(to_parent, &ok, 1) != 1) throw Error("pipe");
  pause();
}

}  // namespace

TEST_CASE("shm transport: a worker killed (SIGKILL) while the server holds a push from its arena: bytes still readable, nothing left mapped") {
  REQUIRE(our_mappings() == 0);
  const std::string address = ipc_address("arena-killed");
  Child child([&](int fd) { arena_pushing_child(address, 50000, fd); });
  zmq::context_t ctx;
  ShmTransport t(ctx, small_options());
  std::unique_ptr<Listener> listener = t.listen(address, EndpointOptions{});
  for (int i = 0; i < 2; ++i) {
    std::optional<Envelope> first = next(*listener);
    REQUIRE(first);
    listener->send(first->from, reply_to(first->message.header, MsgType::kPushReply));
  }
  std::optional<Envelope> push = next(*listener);
  REQUIRE(push);
  CHECK(child.read(1)[0] == std::byte{'1'});
  CHECK(t.stats().arenas_accepted == 1);
  child.kill_and_reap();
  // The dead worker's gradients stay mapped (read-only) while held, and are what it wrote.
  CHECK(floats_of(*push) == values(50000, 7.0f));
  push.reset();
  // The next hello sweeps the dead peer's segment and arena away: only the
  // new connection's two mappings (its own, the listener's) remain.
  {
    std::unique_ptr<Connection> conn = t.connect(address, tensor_options("fresh"));
    handshake(*listener, *conn);
    CHECK(our_mappings() == 2);
  }
  listener.reset();
  CHECK(our_mappings() == 0);
}

TEST_CASE("shm transport: send memory is a pool of arenas: blocks page aligned, zeroed, reused once given back; ordinary memory past 8 arenas") {
  zmq::context_t ctx;
  ShmTransport t(ctx, small_options());
  SendFloats a = t.allocate_send_floats(1000), b = t.allocate_send_floats(1000);
  REQUIRE(t.arena_holding(a.values.data(), 4000) != nullptr);
  CHECK(t.arena_holding(a.values.data(), 4000) == t.arena_holding(b.values.data(), 4000));  // one arena
  CHECK(reinterpret_cast<std::uintptr_t>(a.values.data()) % 4096 == 0);
  CHECK(reinterpret_cast<std::uintptr_t>(b.values.data()) % 4096 == 0);
  CHECK(b.values.data() - a.values.data() == 1024);  // 4,000 bytes take a page
  std::fill(a.values.begin(), a.values.end(), 3.0f);
  float* const first = a.values.data();
  a = {};  // given back
  SendFloats c = t.allocate_send_floats(1000);
  CHECK(c.values.data() == first);  // the block again, zeroed
  CHECK(std::all_of(c.values.begin(), c.values.end(), [](float x) { return x == 0.0f; }));
  // Arenas grow (64 MiB, then twice the last or the block's size), at most 8; then ordinary memory.
  std::vector<SendFloats> big;
  std::set<const ShmArena*> arenas;
  bool ordinary = false;
  for (int i = 0; i < 20 && !ordinary; ++i) {
    big.push_back(t.allocate_send_floats(std::size_t{1} << 28));  // 1 GiB, virtual: never touched
    const std::shared_ptr<ShmArena> arena = t.arena_holding(big.back().values.data(), std::size_t{1} << 30);
    ordinary = arena == nullptr;
    if (arena) arenas.insert(arena.get());
  }
  CHECK(ordinary);
  CHECK(arenas.size() == 7);  // and the first one
  CHECK(big.back().values.size() == std::size_t{1} << 28);
}

TEST_CASE("shm transport: replies from the listener's arena are read in place by the connection; held until it releases them") {
  zmq::context_t ctx;
  ShmTransport t(ctx, small_options());
  std::unique_ptr<Listener> listener = t.listen("tcp://127.0.0.1:*", EndpointOptions{});
  std::unique_ptr<Connection> conn = t.connect(listener->address(), tensor_options("w1"));
  handshake(*listener, *conn);
  const SendFloats weights = t.allocate_send_floats(40000);  // a chunk's weights on a server
  const std::vector<float> v = values(40000, -2.0f);
  std::copy(v.begin(), v.end(), weights.values.begin());
  const auto pull = [&](std::int64_t key) {
    conn->send(push_header(key), owned(values(4, 0.0f)));
    std::optional<Envelope> request = next(*listener);
    REQUIRE(request);
    listener->send(request->from, reply_to(request->message.header), Payload::floats(weights.values, weights.owner));
    std::optional<Envelope> reply = next(*conn);
    REQUIRE(reply);
    return std::move(*reply);
  };
  // The first offers the arena and goes inline (over a slot's size); the connection maps it and says yes.
  {
    const Envelope first = pull(1);
    CHECK(floats_of(first) == v);
  }
  const ShmTransport::Stats before = t.stats();
  Envelope second = pull(2);  // the listener heard the yes while it received this request
  CHECK(floats_of(second) == v);
  CHECK(t.stats().arena_bodies == before.arena_bodies + 1);
  CHECK(t.stats().inline_bodies == before.inline_bodies + 1);  // the request (16 bytes)
  const void* seen = second.message.payload.data();
  CHECK(seen != static_cast<const void*>(weights.values.data()));
  CHECK(mapping_permissions(seen) == "r--s");
  // Held by the listener (the weights are not written) until the connection lets go of the reply.
  CHECK(weights.owner.use_count() == 2);
  second = Envelope{};
  CHECK_FALSE(listener->receive(milliseconds(10)).has_value());
  CHECK(weights.owner.use_count() == 1);
  // Replies not released pile up only to the listener's slots per side (4); the rest go inline.
  std::vector<Envelope> kept;
  for (int i = 0; i < 6; ++i) kept.push_back(pull(10 + i));
  for (const Envelope& e : kept) CHECK(floats_of(e) == v);
  CHECK(t.stats().arena_bodies == before.arena_bodies + 5);  // 4 more
  CHECK(t.stats().no_free_slot >= before.no_free_slot + 2);
  CHECK(weights.owner.use_count() == 5);
  kept.clear();
  CHECK_FALSE(listener->receive(milliseconds(10)).has_value());
  CHECK(weights.owner.use_count() == 1);
}

TEST_CASE("shm transport: forged arena replies to a connection are ProtocolErrors; offers it cannot map get a no") {
  zmq::context_t ctx;
  ShmTransport t(ctx, small_options());
  // A hand-driven listener: a raw ROUTER that attaches to the connection's segment as a listener would.
  zmq::socket_t router(ctx, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  router.bind("tcp://127.0.0.1:*");
  const std::string address = router.get(zmq::sockopt::last_endpoint);
  std::unique_ptr<Connection> conn = t.connect(address, tensor_options("w1"));
  const auto receive_at_router = [&]() { return next_frames(router); };
  const auto send_to_conn = [&](std::vector<zmq::message_t> frames) {
    zmq::message_t id("w1", 2);
    REQUIRE(router.send(id, zmq::send_flags::sndmore));
    for (std::size_t i = 0; i < frames.size(); ++i) {
      REQUIRE(router.send(frames[i], i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none));
    }
  };
  std::vector<zmq::message_t> hello = receive_at_router();
  REQUIRE(hello.size() == 3);
  const ShmAddress seg_address = decode_shm_address(std::span<const std::byte>(static_cast<const std::byte*>(hello[2].data()), kShmAddressBytes));
  std::unique_ptr<ShmSegment> segment = ShmSegment::attach(seg_address, false);
  std::unique_ptr<ShmArena> arena = ShmArena::create(1 << 16);
  for (int i = 0; i < 1000; ++i) reinterpret_cast<float*>(arena->data())[i] = static_cast<float>(i);
  const auto offer = [&](const ShmAddress& a) {
    const auto bytes = encode_shm_address(a);
    std::vector<zmq::message_t> frames;
    frames.push_back(layer_tag('G'));
    frames.emplace_back(bytes.data(), bytes.size());
    send_to_conn(std::move(frames));
    CHECK_FALSE(conn->receive(milliseconds(200)).has_value());  // the layer's own: nothing for the caller
    std::vector<zmq::message_t> answer = receive_at_router();
    REQUIRE(answer.size() == 3);
    return std::pair<char, std::string>{static_cast<const char*>(answer[1].data())[7], answer[2].to_string().substr(8)};
  };
  // Before the yes to its hello, the connection shares no segment: no.
  auto [kind, reason] = offer(arena->address());
  CHECK(kind == 'N');
  CHECK(reason.find("shares no segment") != std::string::npos);
  {
    std::vector<zmq::message_t> yes;
    yes.push_back(layer_tag('A'));
    send_to_conn(std::move(yes));
  }
  ShmAddress wrong = arena->address();
  wrong.bytes += 4096;
  std::tie(kind, reason) = offer(wrong);
  CHECK(kind == 'N');
  CHECK(reason.find("its size is") != std::string::npos);
  std::tie(kind, reason) = offer(arena->address());
  CHECK(kind == 'B');

  Header h = reply_to(push_header(1));
  h.dtype = DType::kFloat32;
  h.num_elems = 1000;
  const auto reply = [&](const ShmDescriptor& ticket, const ShmArenaDescriptor& where, int frames_wanted = 4) {
    const auto t1 = encode_shm_descriptor(ticket);
    const auto t2 = encode_shm_arena_descriptor(where);
    std::vector<zmq::message_t> frames;
    frames.push_back(layer_tag('W'));
    frames.push_back(to_message(encode_header(h)));
    frames.emplace_back(t1.data(), t1.size());
    if (frames_wanted == 4) frames.emplace_back(t2.data(), t2.size());
    send_to_conn(std::move(frames));
  };
  const auto ticket = [&]() {
    ShmSegment::WriteSlot slot = segment->acquire(milliseconds(1000));
    return slot.publish(0);
  };
  const auto expect_refused = [&](const std::string& what) {
    CHECK_THROWS_WITH_AS(next(*conn), doctest::Contains(what.c_str()), ProtocolError);
  };
  const ShmDescriptor good = ticket();
  reply(good, {arena->id(), 0, 4000});
  {
    std::optional<Envelope> got = next(*conn);
    REQUIRE(got);
    CHECK(floats_of(*got) == std::vector<float>(reinterpret_cast<float*>(arena->data()),
                                                reinterpret_cast<float*>(arena->data()) + 1000));
    CHECK_FALSE(segment->handed_back(good));  // still being read
  }
  CHECK(segment->handed_back(good));  // released with the reply
  reply(good, {arena->id(), 0, 4000});  // replayed ticket
  expect_refused("not published");
  // Refused after its ticket checked out: the ticket is still handed back (the listener lets go of the body).
  const ShmDescriptor unknown = ticket();
  reply(unknown, {arena->id() ^ 1, 0, 4000});
  expect_refused("does not map");
  CHECK(segment->handed_back(unknown));
  const ShmDescriptor outside = ticket();
  reply(outside, {arena->id(), (1 << 16) - 100, 4000});
  expect_refused("lie outside");
  CHECK(segment->handed_back(outside));
  reply(ticket(), {arena->id(), 0, 4000}, 3);
  expect_refused("3 frames");
  reply(ticket(), {arena->id(), 0, 400});  // the header says 1000 floats
  expect_refused("payload");
  {
    std::vector<zmq::message_t> frames;
    frames.push_back(layer_tag('P'));  // a push-side arena message sent to a connection
    frames.push_back(to_message(encode_header(h)));
    frames.emplace_back("x", 1);
    send_to_conn(std::move(frames));
    expect_refused("arena data sent to a connection");
  }
}

namespace {

// A child that pulls three times from the listener at `address` and keeps
// every reply (never releasing them), tells the parent and waits to be killed.
void holding_child(const std::string& address, int to_parent) {
  zmq::context_t ctx;
  ShmTransport t(ctx, small_options());
  std::unique_ptr<Connection> conn = t.connect(address, tensor_options("holder"));
  std::vector<Envelope> kept;
  for (int i = 0; i < 3; ++i) {
    conn->send(push_header(i), owned(values(4, 0.0f)));
    std::optional<Envelope> reply = next(*conn);
    if (!reply) throw Error("no reply");
    kept.push_back(std::move(*reply));
  }
  const char ok = t.stats().arenas_accepted == 1 ? '1' : '0';
  if (::write(to_parent, &ok, 1) != 1) throw Error("pipe");
  pause();
}

}  // namespace

TEST_CASE("shm transport: a worker killed (SIGKILL) while it holds arena replies: the server lets go of those weights") {
  const std::string address = ipc_address("holder-killed");
  Child child([&](int fd) { holding_child(address, fd); });
  zmq::context_t ctx;
  ShmTransport t(ctx, small_options());
  std::unique_ptr<Listener> listener = t.listen(address, EndpointOptions{});
  const SendFloats weights = t.allocate_send_floats(30000);
  std::fill(weights.values.begin(), weights.values.end(), 1.5f);
  for (int i = 0; i < 3; ++i) {
    std::optional<Envelope> request = next(*listener);
    REQUIRE(request);
    listener->send(request->from, reply_to(request->message.header), Payload::floats(weights.values, weights.owner));
  }
  CHECK(child.read(1)[0] == std::byte{'1'});
  CHECK(t.stats().arena_bodies == 2);  // the first went inline with the offer
  CHECK(weights.owner.use_count() == 3);  // held for the two it has not released
  child.kill_and_reap();
  // Within a few receives (the peers' processes are looked at every 250 ms) the holds go.
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (weights.owner.use_count() > 1 && Clock::now() < deadline) (void)listener->receive(milliseconds(50));
  CHECK(weights.owner.use_count() == 1);
}
