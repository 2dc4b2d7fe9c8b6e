#include "common/transport/shm/shm_layer.h"

#include <unistd.h>

#include <cstring>
#include <fstream>

#include "common/base/errors.h"

namespace pstrain::shm_detail {

zmq::message_t tag(char kind) {
  zmq::message_t t(kTagBytes);
  std::memcpy(t.data(), kTagPrefix, kTagBytes - 1);
  static_cast<char*>(t.data())[kTagBytes - 1] = kind;
  return t;
}

// The kind of a shared-memory layer message, or 0 for an ordinary one.
char tag_kind(const Buffer& frame) {
  if (frame.size() != kTagBytes || std::memcmp(frame.data(), kTagPrefix, kTagBytes - 1) != 0) return 0;
  return static_cast<const char*>(frame.data())[kTagBytes - 1];
}

// This host's boot and this process's pid namespace: a peer can attach only
// with both the same (it asks the creator's pid for the memfd: shm_memfd.h).
std::string read_boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  char ns[128] = {};
  const ssize_t n = ::readlink("/proc/self/ns/pid", ns, sizeof ns - 1);
  if (id.empty() || n <= 0) return {};  // unknown: no hello is ever accepted or made
  return id + " " + std::string(ns, static_cast<std::size_t>(n));
}

// Header for messages about the layer's own frames (TransportError texts).
Header layer_header() {
  Header h;
  h.type = MsgType::kError;
  return h;
}

// A slot's bytes, held open while the payload frame pointing at them lives.
struct HeldSlot {
  std::shared_ptr<ShmSegment> segment;  // outlives the slot (members go in reverse order)
  ShmSegment::ReadSlot slot;
};

// [tag 'D', header, descriptor] -> [header, payload in place], or the reason
// it cannot be.
std::string open_data(const std::shared_ptr<ShmSegment>& segment, std::vector<Buffer>& frames,
                      std::vector<Buffer>& out) {
  if (frames.size() != 3) {
    return "shared-memory message with " + std::to_string(frames.size()) + " frames (a tag, a header, a descriptor)";
  }
  if (segment == nullptr) return "shared-memory descriptor from a peer with no segment set up (no hello accepted)";
  if (frames[2].size() != kShmDescriptorBytes) {
    return "shared-memory descriptor of " + std::to_string(frames[2].size()) + " bytes, not " +
           std::to_string(kShmDescriptorBytes);
  }
  try {
    const ShmDescriptor d =
        decode_shm_descriptor(std::span<const std::byte>(static_cast<const std::byte*>(frames[2].data()), frames[2].size()));
    auto held = std::make_unique<HeldSlot>(HeldSlot{segment, segment->open(d)});
    const std::span<const std::byte> bytes = held->slot.bytes();
    hand_up(frames, bytes, std::move(held), out);
    return {};
  } catch (const ProtocolError& e) {
    return e.what();
  }
}

// [tag 'P', header, arena descriptor] -> [header, payload in place, the
// arena held mapped while the frame lives], or the reason it cannot be;
// nullopt when the arena is not one `arenas` holds (the caller drops the
// message and tells the sender no).
std::optional<std::string> open_arena_data(const std::map<std::uint64_t, std::shared_ptr<ShmArena>>* arenas,
                                           std::vector<Buffer>& frames, std::vector<Buffer>& out) {
  if (frames.size() != 3) {
    return "shared-memory arena message with " + std::to_string(frames.size()) +
           " frames (a tag, a header, a descriptor)";
  }
  if (frames[2].size() != kShmArenaDescriptorBytes) {
    return "shared-memory arena descriptor of " + std::to_string(frames[2].size()) + " bytes, not " +
           std::to_string(kShmArenaDescriptorBytes);
  }
  try {
    const ShmArenaDescriptor d = decode_shm_arena_descriptor(
        std::span<const std::byte>(static_cast<const std::byte*>(frames[2].data()), frames[2].size()));
    if (arenas == nullptr) return std::nullopt;
    const auto it = arenas->find(d.arena_id);
    if (it == arenas->end()) return std::nullopt;
    const std::span<const std::byte> bytes = it->second->range(d.offset, d.length);
    hand_up(frames, bytes, std::make_unique<std::shared_ptr<ShmArena>>(it->second), out);
    return std::string();
  } catch (const ProtocolError& e) {
    return std::string(e.what());
  }
}

// An 8-byte little-endian arena id and what follows it.
std::uint64_t arena_id_of(const Buffer& frame) {
  std::uint64_t id = 0;
  const auto* b = static_cast<const unsigned char*>(frame.data());
  for (std::size_t i = 0; i < 8 && i < frame.size(); ++i) id |= std::uint64_t{b[i]} << (8 * i);
  return id;
}
zmq::message_t arena_id_frame(std::uint64_t id, const std::string& then) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[static_cast<std::size_t>(i)] = static_cast<char>((id >> (8 * i)) & 0xff);
  bytes += then.substr(0, kMaxReasonBytes);
  return zmq::message_t(bytes.data(), bytes.size());
}

// An arena offer [tag 'G', address]: its arena mapped read-only into `held`
// (at most kMaxArenasPerPeer; `id` gets the offered id), or why not. The
// caller has checked that the offer's connection shares a segment with it.
std::string accept_arena_offer(const std::vector<Buffer>& frames,
                               std::map<std::uint64_t, std::shared_ptr<ShmArena>>& held, std::uint64_t& id) {
  if (frames.size() != 2 || frames[1].size() != kShmAddressBytes) return "malformed arena offer";
  try {
    const ShmAddress address =
        decode_shm_address(std::span<const std::byte>(static_cast<const std::byte*>(frames[1].data()), kShmAddressBytes));
    id = address.segment_id;
    if (held.count(id) == 0 && held.size() >= kMaxArenasPerPeer) {
      return "this connection already has " + std::to_string(held.size()) + " arenas mapped here";
    }
    held[id] = std::shared_ptr<ShmArena>(ShmArena::attach_read_only(address));
    return {};
  } catch (const Error& e) {
    return e.what();
  }
}

// The answer to an arena offer: yes [tag 'B', id] or no [tag 'N', id + reason].
std::array<zmq::message_t, 2> arena_answer(ShmTransport& transport, std::uint64_t id, const std::string& refusal) {
  (refusal.empty() ? transport.counters().arenas_accepted : transport.counters().arenas_refused)
      .fetch_add(1, std::memory_order_relaxed);
  return {tag(refusal.empty() ? kArenaYes : kArenaNo), arena_id_frame(id, refusal)};
}

// Sends head + body as a descriptor into `arena` (the body lies in it whole).
void send_through_arena(ShmTransport& transport, const ShmArena& arena, zmq::socket_t& socket, zmq::message_t& head,
                        const zmq::message_t& body, const Header& header) {
  const auto* at = static_cast<const std::byte*>(body.data());
  const ShmArenaDescriptor d{arena.id(), static_cast<std::uint64_t>(at - arena.data()), body.size()};
  const auto encoded = encode_shm_arena_descriptor(d);
  std::array<zmq::message_t, 3> parts{tag(kArenaData), std::move(head), zmq::message_t(encoded.data(), encoded.size())};
  send_parts_raw(socket, nullptr, parts, header);
  transport.counters().arena_bodies.fetch_add(1, std::memory_order_relaxed);
}

// Sends head + body through a free slot of `segment`, or returns false (the
// caller sends inline; `meddled` set when the peer broke the slot's state, so
// the caller drops the segment). TransportError from ZeroMQ after the slot
// was taken gives the slot back first.
bool send_through_segment(ShmTransport& transport, ShmSegment* segment, zmq::socket_t& socket,
                          const zmq::message_t* routing_id, zmq::message_t& head, std::optional<zmq::message_t>& body,
                          const Header& header, bool& meddled) {
  ShmTransport::Counters& counters = transport.counters();
  if (!body) return false;
  if (segment == nullptr || body->size() < transport.options().min_bytes || body->size() > segment->slot_bytes()) {
    counters.inline_bodies.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  std::optional<ShmSegment::WriteSlot> slot = segment->try_acquire();
  if (!slot) {
    counters.inline_bodies.fetch_add(1, std::memory_order_relaxed);
    counters.no_free_slot.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  std::memcpy(slot->bytes().data(), body->data(), body->size());
  ShmDescriptor d;
  try {
    d = slot->publish(body->size());
  } catch (const ProtocolError&) {
    // The peer changed the slot's state word while it was written (it can
    // write the shared memory): this body goes inline, and the caller stops
    // using the segment.
    counters.inline_bodies.fetch_add(1, std::memory_order_relaxed);
    counters.meddled.fetch_add(1, std::memory_order_relaxed);
    meddled = true;
    return false;
  }
  const auto encoded = encode_shm_descriptor(d);
  std::array<zmq::message_t, 3> parts{tag(kData), std::move(head), zmq::message_t(encoded.data(), encoded.size())};
  try {
    send_parts_raw(socket, routing_id, parts, header);
  } catch (const TransportError&) {
    segment->retract(d);
    throw;
  }
  counters.shm_bodies.fetch_add(1, std::memory_order_relaxed);
  return true;
}

std::chrono::milliseconds left_until(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
  return std::max(left, milliseconds(0));
}

}  // namespace pstrain::shm_detail
