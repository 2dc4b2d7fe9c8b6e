// libFuzzer target: a ShmTransport listener (common/transport/shm/shm_transport.h) fed by a
// hostile peer that shares a segment with it. Per input the peer makes a
// fresh segment, says hello (the listener attaches) and then plays up to 8
// operations from the input:
//   0: publishes a slot (maybe taking it back again: a stale descriptor) and
//      sends its descriptor under a header of fuzzed element count and dtype
//   1: publishes a slot of its own with fuzzed bytes and sends its descriptor,
//      one field maybe replaced by a fuzzed value, under a fuzzed header
//   2: sends a data message with a descriptor of fuzzed bytes
//   3: sends a layer message of a fuzzed kind and 0-3 fuzzed frames
//   4: sends an ordinary message of 1-2 fuzzed frames
//   5: offers the input's arena (once) and sends an arena descriptor into it
//      of fuzzed offset and length under a header of fuzzed bytes
// The listener receives everything; each message is accepted or refused
// with ProtocolError (what a server answers with an error reply), and any
// payload it hands up is read whole. ASan + UBSan catch reads outside the
// slot, use after unmap and leaks; a hang or any other exception is a finding.
#include <array>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "common/base/errors.h"
#include "common/wire/protocol.h"
#include "common/transport/shm/shm_segment.h"
#include "common/transport/shm/shm_transport.h"
#include "common/transport/zmq/zmq_socket.h"
#include "fuzz/fuzz_input.h"

namespace {

using std::chrono::milliseconds;
using namespace pstrain;

zmq::message_t tag(char kind) {
  zmq::message_t t(8);
  std::memcpy(t.data(), "PSTRSHM", 7);
  static_cast<char*>(t.data())[7] = kind;
  return t;
}

zmq::message_t bytes_frame(std::span<const std::byte> b) { return zmq::message_t(b.data(), b.size()); }

struct World {
  zmq::context_t ctx;
  std::unique_ptr<ShmTransport> transport;
  std::unique_ptr<Listener> listener;
  zmq::socket_t peer{ctx, zmq::socket_type::dealer};

  World() {
    ShmTransportOptions o;
    o.segment.slots_per_side = 4;
    o.segment.slot_bytes = 4096;
    o.min_bytes = 1;
    transport = std::make_unique<ShmTransport>(ctx, o);
    EndpointOptions lo;
    lo.limits.max_payload_bytes = 1 << 16;
    listener = transport->listen("inproc://fuzz-shm-layer", lo);
    peer.set(zmq::sockopt::routing_id, "peer");
    peer.set(zmq::sockopt::linger, 0);
    peer.connect("inproc://fuzz-shm-layer");
  }

  void send(std::vector<zmq::message_t> frames) {
    for (std::size_t i = 0; i < frames.size(); ++i) {
      (void)peer.send(frames[i], i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  }

  // Everything the listener has, accepted or refused; true if it saw `n` messages.
  bool drain(int n) {
    int seen = 0;
    for (int idle = 0; seen < n && idle < 200; ++idle) {
      try {
        std::optional<Envelope> env = listener->receive(milliseconds(1));
        if (!env) continue;
        ++seen;
        idle = 0;
        if (env->message.has_payload) {  // read it whole, as the server's apply would
          const auto* p = static_cast<const unsigned char*>(env->message.payload.data());
          unsigned sum = 0;
          for (std::size_t i = 0; i < env->message.payload.size(); ++i) sum += p[i];
          volatile unsigned sink = sum;
          (void)sink;
        }
      } catch (const ProtocolError&) {
        ++seen;
        idle = 0;
      }
    }
    return seen == n;
  }
};

World& world() {
  static World w;  // one listener for the whole run, as a server has
  return w;
}

// Hello; the listener attaches (and drops the previous input's segment).
void say_hello(World& w, const ShmSegment& segment) {
  const auto a = encode_shm_address(segment.address());
  std::string hello(reinterpret_cast<const char*>(a.data()), a.size());
  hello += w.transport->boot_id();
  std::vector<zmq::message_t> frames;
  frames.push_back(tag('H'));
  frames.emplace_back(hello.data(), hello.size());
  w.send(std::move(frames));
  (void)w.listener->receive(milliseconds(5));  // handles the hello (nothing for the caller)
  zmq::message_t yes;
  while (w.peer.recv(yes, zmq::recv_flags::dontwait)) {
  }
}

std::uint64_t take_u64(fuzz::Input& in) {
  std::uint64_t v = 0;
  const auto b = in.take(8);
  std::memcpy(&v, b.data(), b.size());
  return v;
}

// Op 0: a slot published (and maybe taken back again: stale) under a header
// of fuzzed size. Whether a message went.
bool send_published_slot(World& w, ShmSegment& segment, fuzz::Input& in) {
  const std::uint64_t v = take_u64(in);
  std::optional<ShmSegment::WriteSlot> s = segment.try_acquire();
  if (!s) return false;
  const ShmDescriptor d = s->publish(static_cast<std::size_t>(v % (s->bytes().size() + 1)));
  if ((v >> 32) % 2 == 0) segment.retract(d);
  Header h;
  h.type = MsgType::kPush;
  h.role = Role::kWorker;
  h.dtype = (v >> 33) % 2 == 0 ? DType::kFloat32 : DType::kBFloat16;
  h.num_elems = static_cast<std::int64_t>((v >> 40) % 2048);
  std::vector<zmq::message_t> frames;
  frames.push_back(tag('D'));
  frames.push_back(to_message(encode_header(h)));
  const auto e = encode_shm_descriptor(d);
  frames.emplace_back(e.data(), e.size());
  w.send(std::move(frames));
  return true;
}

// Op 1: a real slot, maybe one field forged.
bool send_forged_slot(World& w, ShmSegment& segment, fuzz::Input& in) {
  std::optional<ShmSegment::WriteSlot> s = segment.try_acquire();
  if (!s) return false;
  const auto fill = in.take(in.byte() * 16);
  std::memcpy(s->bytes().data(), fill.data(), fill.size());
  const std::size_t length = (in.byte() | (std::size_t{in.byte()} << 8)) % (s->bytes().size() + 1);
  ShmDescriptor d = s->publish(length);
  const std::uint64_t v = take_u64(in);
  switch (in.byte() % 6) {
    case 0: d.segment_id = v; break;
    case 1: d.slot = static_cast<std::uint32_t>(v); break;
    case 2: d.generation = static_cast<std::uint32_t>(v); break;
    case 3: d.offset = v; break;
    case 4: d.length = v; break;
    default: break;
  }
  const auto head = in.take(header_wire_bytes());
  std::vector<zmq::message_t> frames;
  frames.push_back(tag('D'));
  frames.push_back(bytes_frame(head));
  const auto e = encode_shm_descriptor(d);
  frames.emplace_back(e.data(), e.size());
  w.send(std::move(frames));
  return true;
}

// Op 3: a layer message of a fuzzed kind.
bool send_layer_message(World& w, fuzz::Input& in) {
  std::vector<zmq::message_t> frames;
  const char kind = static_cast<char>(in.byte());
  // A hello, an arena offer or an answer to one is not handed to the
  // caller, and an arena descriptor of an unknown id is dropped: covered
  // by the tests.
  if (kind == 'H' || kind == 'G' || kind == 'B' || kind == 'N' || kind == 'P') return false;
  frames.push_back(tag(kind));
  const int extra = in.byte() % 4;
  for (int f = 0; f < extra; ++f) frames.push_back(bytes_frame(in.take(in.byte())));
  w.send(std::move(frames));
  return true;
}

// Op 5: an arena descriptor (the arena offered at the first one).
void send_arena_data(World& w, std::unique_ptr<ShmArena>& arena, fuzz::Input& in) {
  if (!arena) {
    arena = ShmArena::create(8192);
    const auto fill = in.take(in.byte() * 16);
    std::memcpy(arena->data(), fill.data(), fill.size());
    const auto a = encode_shm_address(arena->address());
    std::vector<zmq::message_t> offer;
    offer.push_back(tag('G'));
    offer.emplace_back(a.data(), a.size());
    w.send(std::move(offer));
  }
  const std::uint64_t v = take_u64(in);
  ShmArenaDescriptor d{arena->id(), (v & 0xffff) % 9000, ((v >> 16) & 0xffff) % 9000};
  if ((v >> 32) % 8 == 0) d.offset = v;  // huge: offset + length may overflow
  if ((v >> 35) % 8 == 0) d.length = ~v;
  std::vector<zmq::message_t> frames;
  frames.push_back(tag('P'));
  frames.push_back(bytes_frame(in.take(header_wire_bytes())));
  const auto e = encode_shm_arena_descriptor(d);
  frames.emplace_back(e.data(), e.size());
  w.send(std::move(frames));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::Input in(data, size);
  World& w = world();
  ShmOptions so;
  so.slots_per_side = 4;
  so.slot_bytes = 4096;
  so.name = "fuzz";
  so.populate = false;
  std::unique_ptr<ShmSegment> segment = ShmSegment::create(so);
  say_hello(w, *segment);
  std::unique_ptr<ShmArena> arena;  // offered at the first op 5
  const int ops = 1 + in.byte() % 8;
  int sent = 0;
  for (int i = 0; i < ops && in.left() > 0; ++i) {
    const int op = in.byte() % 6;
    if (op == 0) {
      if (send_published_slot(w, *segment, in)) ++sent;
    } else if (op == 1) {
      if (send_forged_slot(w, *segment, in)) ++sent;
    } else if (op == 2) {
      std::vector<zmq::message_t> frames;
      frames.push_back(tag('D'));
      frames.push_back(bytes_frame(in.take(header_wire_bytes())));
      frames.push_back(bytes_frame(in.take(in.byte() % 40)));
      w.send(std::move(frames));
      ++sent;
    } else if (op == 3) {
      if (send_layer_message(w, in)) ++sent;
    } else if (op == 5) {
      send_arena_data(w, arena, in);
      ++sent;
    } else {
      std::vector<zmq::message_t> frames;
      frames.push_back(bytes_frame(in.take(in.byte())));
      if (in.byte() % 2 == 0) frames.push_back(bytes_frame(in.take(in.byte() * 4)));
      w.send(std::move(frames));
      ++sent;
    }
  }
  if (!w.drain(sent)) __builtin_trap();  // a message the listener never delivered or refused: a hang
  return 0;
}
