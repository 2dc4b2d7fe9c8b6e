#include "common/transport/shm_transport.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <vector>

#include "common/base/errors.h"
#include "common/wire/security.h"
#include "common/transport/zmq_endpoint.h"
#include "common/transport/zmq_transport.h"

namespace pstrain {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr std::size_t kTagBytes = 8;
constexpr char kTagPrefix[] = "PSTRSHM";  // 7 bytes, then the kind
constexpr char kHello = 'H', kYes = 'A', kNo = 'R', kData = 'D';
constexpr char kArenaOffer = 'G', kArenaYes = 'B', kArenaNo = 'N', kArenaData = 'P', kArenaReply = 'W';
constexpr std::size_t kMaxArenasPerPeer = 8;
constexpr std::size_t kMaxReasonBytes = 512;

zmq::message_t tag(char kind) {
  zmq::message_t t(kTagBytes);
  std::memcpy(t.data(), kTagPrefix, kTagBytes - 1);
  static_cast<char*>(t.data())[kTagBytes - 1] = kind;
  return t;
}

// The kind of a shared-memory layer message, or 0 for an ordinary one.
char tag_kind(const zmq::message_t& frame) {
  if (frame.size() != kTagBytes || std::memcmp(frame.data(), kTagPrefix, kTagBytes - 1) != 0) return 0;
  return static_cast<const char*>(frame.data())[kTagBytes - 1];
}

// This host's boot and this process's pid namespace: a peer can attach only
// with both the same (it opens /proc/<pid>/fd of the creator's pid).
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

// [tag, header, ...] -> [header, payload]: the payload frame points at
// `bytes` in place, and `held` (what keeps them readable) goes with it.
template <class Held>
void hand_up(std::vector<zmq::message_t>& frames, std::span<const std::byte> bytes, std::unique_ptr<Held> held,
             std::vector<zmq::message_t>& out) {
  zmq::message_t body(const_cast<std::byte*>(bytes.data()), bytes.size(),
                      [](void* /*data*/, void* hint) { delete static_cast<Held*>(hint); }, held.get());
  held.release();  // now owned by the frame
  out.clear();
  out.push_back(std::move(frames[1]));
  out.push_back(std::move(body));
}

// [tag 'D', header, descriptor] -> [header, payload in place], or the reason
// it cannot be.
std::string open_data(const std::shared_ptr<ShmSegment>& segment, std::vector<zmq::message_t>& frames,
                      std::vector<zmq::message_t>& out) {
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
                                           std::vector<zmq::message_t>& frames, std::vector<zmq::message_t>& out) {
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

// A reply's body in the listener's arena, and the slot standing for it:
// released (the listener may write those weights again) once the frame goes.
struct HeldArenaReply {
  std::shared_ptr<ShmSegment> segment;  // outlives the slot (members go in reverse order)
  ShmSegment::ReadSlot slot;
  std::shared_ptr<ShmArena> arena;
};

// An 8-byte little-endian arena id and what follows it.
std::uint64_t arena_id_of(const zmq::message_t& frame) {
  std::uint64_t id = 0;
  const auto* b = static_cast<const unsigned char*>(frame.data());
  for (std::size_t i = 0; i < 8 && i < frame.size(); ++i) id |= std::uint64_t{b[i]} << (8 * i);
  return id;
}
zmq::message_t arena_id_frame(std::uint64_t id, const std::string& then = {}) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[static_cast<std::size_t>(i)] = static_cast<char>((id >> (8 * i)) & 0xff);
  bytes += then.substr(0, kMaxReasonBytes);
  return zmq::message_t(bytes.data(), bytes.size());
}

// An arena offer [tag 'G', address]: its arena mapped read-only into `held`
// (at most kMaxArenasPerPeer; `id` gets the offered id), or why not. The
// caller has checked that the offer's connection shares a segment with it.
std::string accept_arena_offer(const std::vector<zmq::message_t>& frames,
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

// What both endpoints' receive does: waits up to `timeout` for a message for
// the caller. An ordinary message is returned as it came; a data message is
// opened in segment_of(sender) (or refused with the reason); one from a
// sender with no segment goes to no_segment(sender), which returns whether it
// dealt with it (then it is dropped); an arena data or reply message goes to
// arena_data(kind, sender, frames, out), which returns the reason it was refused
// ("" when opened) or nullopt when it was dropped; the layer's own messages go to
// control(kind, sender, frames), which returns whether it took the kind (then
// the wait goes on, within `timeout`); any other kind is refused.
template <class Frames, class SegmentOf, class NoSegment, class ArenaData, class Control>
std::optional<Frames> receive_through_layer(zmq::socket_t& socket, bool routed, std::chrono::milliseconds timeout,
                                            SegmentOf&& segment_of, NoSegment&& no_segment, ArenaData&& arena_data,
                                            Control&& control) {
  const auto deadline = Clock::now() + timeout;
  while (true) {
    std::optional<std::vector<zmq::message_t>> got = receive_frames_raw(socket, left_until(deadline));
    if (!got) return std::nullopt;
    Frames f;
    if (routed) {
      f.from = PeerId(got->front().to_string());
      got->erase(got->begin());
    }
    if (!got->empty()) f.user_id = frame_user_id(got->front());
    const char kind = got->empty() ? 0 : tag_kind(got->front());
    if (kind == 0) {
      f.frames = std::move(*got);
      return f;
    }
    if (kind == kData) {
      const std::shared_ptr<ShmSegment> segment = segment_of(f.from);
      if (segment == nullptr && no_segment(f.from)) {  // dropped, the sender told (listener)
        if (Clock::now() >= deadline) return std::nullopt;
        continue;
      }
      f.protocol_error = open_data(segment, *got, f.frames);
      return f;
    }
    if (kind == kArenaData || kind == kArenaReply) {
      std::optional<std::string> refused = arena_data(kind, f.from, *got, f.frames);
      if (!refused) {  // dropped, the sender told (listener)
        if (Clock::now() >= deadline) return std::nullopt;
        continue;
      }
      f.protocol_error = std::move(*refused);
      return f;
    }
    if (control(kind, f.from, *got)) {  // the layer's own message: wait on for the caller's, within the time
      if (Clock::now() >= deadline) return std::nullopt;
      continue;
    }
    f.protocol_error = "shared-memory layer message of unknown kind " + std::to_string(static_cast<int>(kind));
    return f;
  }
}

class ShmListener final : public Listener, public ZmqSocketHolder {
 public:
  ShmListener(ShmTransport& transport, zmq::context_t& ctx, const std::string& address, EndpointOptions options)
      : Listener(transport, options), ZmqSocketHolder(make_socket(ctx, zmq::socket_type::router, options.socket)),
        shm_(transport) {
    address_ = bind_socket(socket_, address);
  }
  const std::string& address() const override { return address_; }

 protected:
  std::optional<Frames> receive_frames(std::chrono::milliseconds timeout) override {
    std::optional<Frames> got = receive_listener(timeout);
    // After the wait: a push handled next may need weights a reply held until now.
    release_all_handed_back();
    return got;
  }

 private:
  std::optional<Frames> receive_listener(std::chrono::milliseconds timeout) {
    return receive_through_layer<Frames>(
        socket_, /*routed=*/true, timeout,
        [this](const PeerId& from) {
          const auto it = segments_.find(from);
          return it == segments_.end() ? nullptr : it->second;
        },
        [this](const PeerId& from) {
          // A descriptor from a connection this listener holds no segment for:
          // it said hello to a process before this one at the same address (a
          // restarted server; ZeroMQ reconnected it), or it never did. The
          // bytes cannot be read: the message is dropped, as if lost with the
          // old process, and the connection is told no, so it sends inline
          // from now on (a worker resends what a restarted server never
          // answered).
          shm_.counters().orphan_descriptors.fetch_add(1, std::memory_order_relaxed);
          say_no(from, "no shared-memory segment for this connection here (the listener restarted?)");
          return true;
        },
        [this](char kind, const PeerId& from, std::vector<zmq::message_t>& frames,
               std::vector<zmq::message_t>& out) -> std::optional<std::string> {
          if (kind == kArenaReply) return std::string("a shared-memory arena reply sent to a listener");
          const auto it = arenas_.find(from);
          std::optional<std::string> opened = open_arena_data(it == arenas_.end() ? nullptr : &it->second, frames, out);
          if (opened && opened->empty()) shm_.counters().arena_bodies_read.fetch_add(1, std::memory_order_relaxed);
          if (!opened) {  // an arena this listener holds none of for it: as for an orphan slot descriptor
            shm_.counters().orphan_descriptors.fetch_add(1, std::memory_order_relaxed);
            drop_peer(from);
            say_no(from, "no shared-memory arena of that id for this connection here (the listener restarted?)");
          }
          return opened;
        },
        [this](char kind, const PeerId& from, std::vector<zmq::message_t>& frames) {
          if (kind == kHello) {
            answer_hello(from, frames);
            return true;
          }
          if (kind == kArenaOffer) {
            answer_arena_offer(from, frames);
            return true;
          }
          if (kind == kArenaYes || kind == kArenaNo) {  // about an arena of ours this listener offered
            const auto offered = offered_.find(from);  // no entry for a peer never offered one
            if (offered != offered_.end() && frames.size() == 2 && frames[1].size() >= 8) {
              const auto it = offered->second.find(arena_id_of(frames[1]));
              if (it != offered->second.end() && it->second == ArenaState::kOffered) {
                it->second = kind == kArenaYes ? ArenaState::kAccepted : ArenaState::kRefused;
              }
            }
            return true;
          }
          return false;
        });
  }

 protected:
  void send_frames(const PeerId* to, zmq::message_t head, std::optional<zmq::message_t> body,
                   const Header& header) override {
    const zmq::message_t id(to->bytes().data(), to->bytes().size());
    // No liveness check here (it costs a read of /proc per send): a peer that
    // is gone fails the send, and the slot is taken back.
    ShmSegment* segment = nullptr;
    if (body) {
      const auto it = segments_.find(*to);
      if (it != segments_.end()) segment = it->second.get();
    }
    bool meddled = false;
    if (segment != nullptr && body->size() >= shm_.options().min_bytes &&
        send_from_arena(*to, *segment, id, head, body, header, meddled)) {
      return;
    }
    if (!meddled && send_through_segment(shm_, segment, socket_, &id, head, body, header, meddled)) return;
    if (meddled) drop_peer(*to);  // its later descriptors get a no (see receive_frames)
    send_frames_raw(socket_, &id, std::move(head), std::move(body), header);
  }

 private:
  void answer_hello(const PeerId& from, std::vector<zmq::message_t>& frames) {
    drop_peer(from);  // a new hello replaces the connection's old segment and arenas, whatever the answer
    std::string refusal;
    if (frames.size() != 2 || frames[1].size() < kShmAddressBytes) {
      refusal = "malformed hello";
    } else {
      const auto* bytes = static_cast<const std::byte*>(frames[1].data());
      const std::string boot(static_cast<const char*>(frames[1].data()) + kShmAddressBytes,
                             frames[1].size() - kShmAddressBytes);
      if (boot != shm_.boot_id() || boot.empty()) {
        refusal = "the peer is on another host (or in another pid namespace)";
      } else {
        sweep();
        if (segments_.size() >= shm_.options().max_segments) {
          refusal = "this listener already holds " + std::to_string(segments_.size()) + " segments";
        } else {
          try {
            const ShmAddress address = decode_shm_address(std::span<const std::byte>(bytes, kShmAddressBytes));
            if (address.bytes > max_segment_bytes()) {
              refusal = "a segment of " + std::to_string(address.bytes) + " bytes, over this job's " +
                        std::to_string(max_segment_bytes());
            } else {
              segments_[from] = std::shared_ptr<ShmSegment>(ShmSegment::attach(address, /*populate=*/false));
            }
          } catch (const Error& e) {
            refusal = e.what();
          }
        }
      }
    }
    if (!refusal.empty()) {
      shm_.counters().refused.fetch_add(1, std::memory_order_relaxed);
      say_no(from, refusal);
      return;
    }
    shm_.counters().accepted.fetch_add(1, std::memory_order_relaxed);
    std::array<zmq::message_t, 1> yes{tag(kYes)};
    const zmq::message_t id(from.bytes().data(), from.bytes().size());
    try {
      send_parts_raw(socket_, &id, yes, layer_header());
    } catch (const TransportError&) {
      drop_peer(from);  // it is gone or does not read: it goes inline if it ever comes back
    }
  }

  // An arena offer: attached read-only when the connection has a segment
  // here (its hello was accepted: same host), at most kMaxArenasPerPeer.
  void answer_arena_offer(const PeerId& from, std::vector<zmq::message_t>& frames) {
    std::uint64_t id = 0;
    std::string refusal;
    if (segments_.find(from) == segments_.end()) {  // never an entry in arenas_ without a segment
      refusal = frames.size() == 2 ? "an arena offer from a connection with no segment here" : "malformed arena offer";
    } else {
      refusal = accept_arena_offer(frames, arenas_[from], id);
    }
    std::array<zmq::message_t, 2> answer = arena_answer(shm_, id, refusal);
    const zmq::message_t to(from.bytes().data(), from.bytes().size());
    try {
      send_parts_raw(socket_, &to, answer, layer_header());
    } catch (const TransportError&) {
      // Its queue is full (it may still be reading replies it holds: those
      // stay held) or it is gone: it never hears the yes, so that arena goes.
      if (refusal.empty()) arenas_[from].erase(id);
    }
  }

  void drop_peer(const PeerId& peer) {
    segments_.erase(peer);
    arenas_.erase(peer);
    offered_.erase(peer);
    held_.erase(peer);
  }

  // A body lying in an arena of this process (a chunk's weights, common/
  // transport.h allocate_send_floats) goes to a peer that mapped that arena
  // as [tag 'W', header, slot descriptor, arena descriptor]: the peer reads
  // it in place and then releases the slot, an empty one of this side that
  // stands for the reply. Until then this listener holds the body (its
  // owner: the weights are not written while held); no free slot, or an
  // arena not yet accepted (offered now), and it goes the usual way.
  bool send_from_arena(const PeerId& to, ShmSegment& segment, const zmq::message_t& id, zmq::message_t& head,
                       std::optional<zmq::message_t>& body, const Header& header, bool& meddled) {
    const std::shared_ptr<ShmArena> arena = shm_.arena_holding(body->data(), body->size());
    if (arena == nullptr) return false;
    const auto state = offered_[to].try_emplace(arena->id(), ArenaState::kOffered);
    if (state.second) {
      const auto address = encode_shm_address(arena->address());
      std::array<zmq::message_t, 2> offer{tag(kArenaOffer), zmq::message_t(address.data(), address.size())};
      try {
        send_parts_raw(socket_, &id, offer, layer_header());
      } catch (const TransportError&) {
        state.first->second = ArenaState::kRefused;  // it does not read: never again on this connection
      }
      return false;
    }
    if (state.first->second != ArenaState::kAccepted) return false;
    release_handed_back(to, segment);
    std::optional<ShmSegment::WriteSlot> slot = segment.try_acquire();
    if (!slot) {
      shm_.counters().no_free_slot.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    ShmDescriptor ticket;
    try {
      ticket = slot->publish(0);
    } catch (const ProtocolError&) {
      shm_.counters().meddled.fetch_add(1, std::memory_order_relaxed);
      meddled = true;
      return false;
    }
    const auto* at = static_cast<const std::byte*>(body->data());
    const ShmArenaDescriptor where{arena->id(), static_cast<std::uint64_t>(at - arena->data()), body->size()};
    const auto t = encode_shm_descriptor(ticket);
    const auto w = encode_shm_arena_descriptor(where);
    std::array<zmq::message_t, 4> parts{tag(kArenaReply), std::move(head), zmq::message_t(t.data(), t.size()),
                                        zmq::message_t(w.data(), w.size())};
    try {
      send_parts_raw(socket_, &id, parts, header);
    } catch (const TransportError&) {
      segment.retract(ticket);
      throw;
    }
    held_[to].push_back(HeldReply{ticket, std::move(*body)});
    shm_.counters().arena_bodies.fetch_add(1, std::memory_order_relaxed);
    return true;
  }

  // Lets go of the bodies whose slot `to` has released (or taken again).
  void release_handed_back(const PeerId& to, const ShmSegment& segment) {
    const auto it = held_.find(to);
    if (it == held_.end()) return;
    std::erase_if(it->second, [&](const HeldReply& h) { return segment.handed_back(h.ticket); });
  }

  // Every peer's (receive_frames, before the next message is handled: a
  // push may need a spare the last reply held). A peer whose process is gone
  // or whose side is closed reads nothing any more (its frames holding the
  // replies went with its segment): all its holds go, looked at every 250 ms.
  void release_all_handed_back() {
    const auto now = Clock::now();
    const bool look_at_peers = now >= next_peer_check_;
    if (look_at_peers) next_peer_check_ = now + milliseconds(250);
    for (auto it = held_.begin(); it != held_.end();) {
      const auto seg = segments_.find(it->first);
      if (seg == segments_.end()) {
        it = held_.erase(it);  // dropped without drop_peer: nothing can release them any more
        continue;
      }
      std::erase_if(it->second, [&](const HeldReply& h) { return seg->second->handed_back(h.ticket); });
      if (!it->second.empty() && look_at_peers && seg->second->peer_state() != ShmSegment::PeerState::kAttached) {
        it->second.clear();
      }
      it = it->second.empty() ? held_.erase(it) : std::next(it);
    }
  }

  // Tells a connection no (it stops using shared memory), never waiting.
  void say_no(const PeerId& to, const std::string& reason) {
    std::array<zmq::message_t, 2> no{tag(kNo), zmq::message_t(reason.data(), std::min(reason.size(), kMaxReasonBytes))};
    const zmq::message_t id(to.bytes().data(), to.bytes().size());
    try {
      send_parts_raw(socket_, &id, no, layer_header());
    } catch (const TransportError&) {
      // gone, or its queue is full: it learns nothing more from us
    }
  }

  // The largest segment a peer may offer: twice what this transport would
  // make (the job's peers use the same options), so a hostile hello cannot
  // make the listener map gigabytes.
  std::uint64_t max_segment_bytes() const {
    const ShmOptions& o = shm_.options().segment;
    return 2 * (2 * std::uint64_t{o.slots_per_side} * (o.slot_bytes + 4096) + (std::uint64_t{1} << 20));
  }

  // Drops the segments whose peer has closed its side or whose process is gone.
  void sweep() {
    std::vector<PeerId> gone;
    for (const auto& [peer, segment] : segments_) {
      if (segment->peer_state() != ShmSegment::PeerState::kAttached) gone.push_back(peer);
    }
    for (const PeerId& peer : gone) drop_peer(peer);
  }

  ShmTransport& shm_;
  std::string address_;
  std::map<PeerId, std::shared_ptr<ShmSegment>> segments_;  // attached, by the connection that sent the hello
  std::map<PeerId, std::map<std::uint64_t, std::shared_ptr<ShmArena>>> arenas_;  // its arenas, read-only, by id
  enum class ArenaState { kOffered, kAccepted, kRefused };
  std::map<PeerId, std::map<std::uint64_t, ArenaState>> offered_;  // this process's arenas offered to it
  struct HeldReply {
    ShmDescriptor ticket;  // the empty slot it releases once read
    zmq::message_t body;   // holds the weights' owner
  };
  std::map<PeerId, std::vector<HeldReply>> held_;  // arena replies it has not released yet
  Clock::time_point next_peer_check_{};            // release_all_handed_back's look at peers' processes
};

class ShmConnection final : public Connection, public ZmqSocketHolder {
 public:
  ShmConnection(ShmTransport& transport, zmq::context_t& ctx, const std::string& address, EndpointOptions options)
      : Connection(transport, options), ZmqSocketHolder(make_socket(ctx, zmq::socket_type::dealer, options.socket)),
        shm_(transport) {
    set_connection_identity(socket_, options.identity, address);
    connect_socket(socket_, address);
    if (options.carries_tensors) say_hello();
  }

  void abandon() override {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.close();
    on_ = false;
    segment_.reset();  // freed once the frames still pointing into it are gone
  }

 protected:
  std::optional<Frames> receive_frames(std::chrono::milliseconds timeout) override {
    return receive_through_layer<Frames>(
        socket_, /*routed=*/false, timeout, [this](const PeerId&) { return segment_; },
        [](const PeerId&) { return false; },  // refused with the reason: a listener's slots it never set up
        [this](char kind, const PeerId&, std::vector<zmq::message_t>& frames,
               std::vector<zmq::message_t>& out) -> std::optional<std::string> {
          if (kind != kArenaReply) return std::string("shared-memory arena data sent to a connection");
          return open_arena_reply(frames, out);
        },
        [this](char kind, const PeerId&, std::vector<zmq::message_t>& frames) {
          if (kind == kYes) {
            on_ = segment_ != nullptr;
            return true;
          }
          if (kind == kNo) {
            shm_.counters().noes_heard.fetch_add(1, std::memory_order_relaxed);
            on_ = false;
            segment_.reset();
            arenas_.clear();
            peer_arenas_.clear();
            return true;
          }
          if (kind == kArenaOffer) {
            answer_arena_offer(frames);
            return true;
          }
          if (kind == kArenaYes || kind == kArenaNo) {
            // Only for an arena this connection offered and has no answer for.
            if (frames.size() == 2 && frames[1].size() >= 8) {
              const auto it = arenas_.find(arena_id_of(frames[1]));
              if (it != arenas_.end() && it->second == ArenaState::kOffered) {
                it->second = kind == kArenaYes ? ArenaState::kAccepted : ArenaState::kRefused;
              }
            }
            return true;
          }
          return false;
        });
  }

  void send_frames(const PeerId* /*to*/, zmq::message_t head, std::optional<zmq::message_t> body,
                   const Header& header) override {
    if (on_ && body && body->size() >= shm_.options().min_bytes) {
      if (const std::shared_ptr<ShmArena> arena = shm_.arena_holding(body->data(), body->size())) {
        const auto state = arenas_.try_emplace(arena->id(), ArenaState::kOffered);
        if (state.second) {
          offer_arena(*arena);
        } else if (state.first->second == ArenaState::kAccepted) {
          send_through_arena(shm_, *arena, socket_, head, *body, header);
          return;
        }
      }
    }
    bool meddled = false;
    if (send_through_segment(shm_, on_ ? segment_.get() : nullptr, socket_, nullptr, head, body, header, meddled)) {
      return;
    }
    if (meddled) on_ = false;  // the listener changed a slot's state while it was written
    send_frames_raw(socket_, nullptr, std::move(head), std::move(body), header);
  }

 private:
  // Creates this connection's segment and offers it. A system that refuses
  // (no memfd, no memory) leaves the connection inline.
  void say_hello() {
    if (shm_.boot_id().empty()) return;  // this host's boot id or pid namespace is unknown
    try {
      segment_ = std::shared_ptr<ShmSegment>(ShmSegment::create(shm_.options().segment));
    } catch (const Error&) {
      return;
    }
    const auto address = encode_shm_address(segment_->address());
    std::string hello(reinterpret_cast<const char*>(address.data()), address.size());
    hello += shm_.boot_id();
    std::array<zmq::message_t, 2> parts{tag(kHello), zmq::message_t(hello.data(), hello.size())};
    send_parts_raw(socket_, nullptr, parts, layer_header());
  }

  // The listener offers an arena of its own (its weights): mapped read-only
  // when this connection shares a segment with it (same host), at most
  // kMaxArenasPerPeer; answered yes or no (a reply from it then comes as 'W').
  void answer_arena_offer(std::vector<zmq::message_t>& frames) {
    std::uint64_t id = 0;
    const std::string refusal = (!on_ || segment_ == nullptr) && frames.size() == 2
                                    ? "an arena offer to a connection that shares no segment"
                                    : accept_arena_offer(frames, peer_arenas_, id);
    std::array<zmq::message_t, 2> answer = arena_answer(shm_, id, refusal);
    try {
      send_parts_raw(socket_, nullptr, answer, layer_header());
    } catch (const TransportError&) {
      // its queue is full or it is gone: it keeps sending the usual way
    }
  }

  // [tag 'W', header, slot descriptor, arena descriptor] -> [header, the
  // body in place in the listener's arena], the slot (the reply's ticket)
  // released when the payload frame is dropped; or why not.
  std::string open_arena_reply(std::vector<zmq::message_t>& frames, std::vector<zmq::message_t>& out) {
    if (frames.size() != 4) {
      return "shared-memory arena reply with " + std::to_string(frames.size()) +
             " frames (a tag, a header, a slot descriptor, an arena descriptor)";
    }
    if (segment_ == nullptr) return "shared-memory arena reply on a connection with no segment";
    if (frames[2].size() != kShmDescriptorBytes || frames[3].size() != kShmArenaDescriptorBytes) {
      return "shared-memory arena reply with descriptors of " + std::to_string(frames[2].size()) + " and " +
             std::to_string(frames[3].size()) + " bytes, not " + std::to_string(kShmDescriptorBytes) + " and " +
             std::to_string(kShmArenaDescriptorBytes);
    }
    try {
      const ShmDescriptor ticket = decode_shm_descriptor(
          std::span<const std::byte>(static_cast<const std::byte*>(frames[2].data()), frames[2].size()));
      const ShmArenaDescriptor where = decode_shm_arena_descriptor(
          std::span<const std::byte>(static_cast<const std::byte*>(frames[3].data()), frames[3].size()));
      // The ticket first: a reply refused below still hands its slot back
      // (the ReadSlot's destructor), so the listener lets go of its body.
      ShmSegment::ReadSlot slot = segment_->open(ticket);
      const auto it = peer_arenas_.find(where.arena_id);
      if (it == peer_arenas_.end()) return "shared-memory arena reply naming an arena this connection does not map";
      const std::span<const std::byte> bytes = it->second->range(where.offset, where.length);
      hand_up(frames, bytes, std::make_unique<HeldArenaReply>(HeldArenaReply{segment_, std::move(slot), it->second}), out);
      return {};
    } catch (const ProtocolError& e) {
      return e.what();
    }
  }

  // Offers `arena` to the listener (its yes or no comes back as a layer message).
  void offer_arena(const ShmArena& arena) {
    const auto address = encode_shm_address(arena.address());
    std::array<zmq::message_t, 2> parts{tag(kArenaOffer), zmq::message_t(address.data(), address.size())};
    send_parts_raw(socket_, nullptr, parts, layer_header());
  }

  enum class ArenaState { kOffered, kAccepted, kRefused };

  ShmTransport& shm_;
  std::shared_ptr<ShmSegment> segment_;
  bool on_ = false;  // the listener attached: bodies may go through the segment
  std::map<std::uint64_t, ArenaState> arenas_;  // this transport's arenas offered on this connection
  std::map<std::uint64_t, std::shared_ptr<ShmArena>> peer_arenas_;  // the listener's, mapped read-only, by id
};

}  // namespace

ShmTransportOptions shm_options_for(std::int64_t partition_bytes) {
  ShmTransportOptions o;
  constexpr std::size_t kMinSlot = std::size_t{64} << 10, kMaxSlot = std::size_t{256} << 20;
  constexpr std::size_t kSideBytes = std::size_t{64} << 20;
  const std::size_t wanted = partition_bytes > 0 ? static_cast<std::size_t>(partition_bytes) : kMinSlot;
  o.segment.slot_bytes = std::clamp(wanted, kMinSlot, kMaxSlot);
  o.segment.slots_per_side =
      static_cast<std::uint32_t>(std::clamp<std::size_t>(kSideBytes / o.segment.slot_bytes, 8, 256));
  o.segment.populate = false;
  o.segment.name = "conn";
  return o;
}

std::unique_ptr<Listener> ShmTransport::listen(const std::string& address, EndpointOptions options) {
  return std::make_unique<ShmListener>(*this, ctx_, address, std::move(options));
}

std::unique_ptr<Connection> ShmTransport::connect(const std::string& address, EndpointOptions options) {
  return std::make_unique<ShmConnection>(*this, ctx_, address, std::move(options));
}

std::vector<bool> ShmTransport::wait_any(std::span<Endpoint* const> endpoints, std::chrono::milliseconds timeout) {
  return poll_zmq_endpoints(endpoints, timeout);
}

std::unique_ptr<ZapHandler> ShmTransport::authenticate(const SecurityContext* security, Logger& log) {
  return start_zap_handler(ctx_, security, log);
}

// The arenas of one transport and the blocks given out of them.
class ShmArenaPool : public std::enable_shared_from_this<ShmArenaPool> {
 public:
  static constexpr std::size_t kMaxArenas = kMaxArenasPerPeer;  // a listener maps at most this many per peer
  static constexpr std::size_t kFirstArenaBytes = std::size_t{64} << 20;

  // Zeroed floats, or nothing when the pool is used up or the system refuses.
  std::optional<SendFloats> allocate(std::size_t count) {
    const std::size_t bytes = (std::max<std::size_t>(count, 1) * sizeof(float) + 4095) / 4096 * 4096;
    std::byte* at = nullptr;
    bool reused = false;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      auto given = free_.find(bytes);
      if (given != free_.end() && !given->second.empty()) {
        at = given->second.back();
        given->second.pop_back();
        reused = true;
      } else if (!arenas_.empty() && arenas_.back()->size() - used_ >= bytes) {
        at = arenas_.back()->data() + used_;  // never used: zero
        used_ += bytes;
      } else if (arenas_.size() < kMaxArenas) {
        const std::size_t size = std::max(bytes, kFirstArenaBytes << arenas_.size());
        try {
          arenas_.push_back(std::shared_ptr<ShmArena>(ShmArena::create(size)));
        } catch (const Error&) {
          return std::nullopt;
        }
        at = arenas_.back()->data();
        used_ = bytes;
      } else {
        return std::nullopt;
      }
    }
    if (reused) std::memset(at, 0, bytes);  // outside the lock: blocks can be big
    SendFloats out;
    out.values = std::span<float>(reinterpret_cast<float*>(at), count);
    out.owner = std::shared_ptr<void>(at, [pool = shared_from_this(), bytes](void* p) {
      pool->give_back(static_cast<std::byte*>(p), bytes);
    });
    return out;
  }

  std::shared_ptr<ShmArena> holding(const void* data, std::size_t bytes) const {
    const std::lock_guard<std::mutex> lock(mutex_);
    for (const std::shared_ptr<ShmArena>& arena : arenas_) {
      if (arena->holds(data, bytes)) return arena;
    }
    return nullptr;
  }

 private:
  void give_back(std::byte* at, std::size_t bytes) {
    const std::lock_guard<std::mutex> lock(mutex_);
    free_[bytes].push_back(at);
  }

  mutable std::mutex mutex_;
  std::vector<std::shared_ptr<ShmArena>> arenas_;
  std::size_t used_ = 0;                                 // bytes given out of arenas_.back() so far
  std::map<std::size_t, std::vector<std::byte*>> free_;  // blocks given back, by size
};

ShmTransport::ShmTransport(zmq::context_t& ctx, ShmTransportOptions options)
    : ctx_(ctx), options_(std::move(options)), boot_id_(read_boot_id()), pool_(std::make_shared<ShmArenaPool>()) {}

SendFloats ShmTransport::allocate_send_floats(std::size_t count) {
  if (std::optional<SendFloats> block = pool_->allocate(count)) return std::move(*block);
  return Transport::allocate_send_floats(count);  // ordinary memory, sent through slots
}

std::shared_ptr<ShmArena> ShmTransport::arena_holding(const void* data, std::size_t bytes) const {
  return pool_->holding(data, bytes);
}

ShmTransport::Stats ShmTransport::stats() const {
  Stats s;
  s.shm_bodies = counters_.shm_bodies.load();
  s.inline_bodies = counters_.inline_bodies.load();
  s.no_free_slot = counters_.no_free_slot.load();
  s.accepted = counters_.accepted.load();
  s.refused = counters_.refused.load();
  s.orphan_descriptors = counters_.orphan_descriptors.load();
  s.meddled = counters_.meddled.load();
  s.noes_heard = counters_.noes_heard.load();
  s.arena_bodies = counters_.arena_bodies.load();
  s.arenas_accepted = counters_.arenas_accepted.load();
  s.arenas_refused = counters_.arenas_refused.load();
  s.arena_bodies_read = counters_.arena_bodies_read.load();
  return s;
}

std::unique_ptr<Transport> make_transport(zmq::context_t& ctx, const std::string& kind, std::int64_t partition_bytes) {
  if (kind == "tcp" || kind == "ipc") return std::make_unique<ZmqTransport>(ctx);
  if (kind == "shm") return std::make_unique<ShmTransport>(ctx, shm_options_for(partition_bytes));
  throw ConfigError("unknown transport '" + kind + "' (tcp, ipc or shm)");
}

}  // namespace pstrain
