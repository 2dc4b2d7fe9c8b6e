// ShmTransport's Listener (common/transport/shm/shm_transport.h).
#include <iterator>

#include "common/base/errors.h"
#include "common/transport/shm/shm_layer.h"
#include "common/transport/zmq/zmq_reply_budget.h"

namespace pstrain::shm_detail {

namespace {

using std::chrono::milliseconds;

class ShmListener final : public BudgetedListener, public ZmqSocketHolder {
 public:
  ShmListener(ShmTransport& transport, zmq::context_t& ctx, const std::string& address, EndpointOptions options)
      : BudgetedListener(transport, options), ZmqSocketHolder(make_socket(ctx, zmq::socket_type::router, options.socket)),
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
        [this](char kind, const PeerId& from, std::vector<Buffer>& frames,
               std::vector<Buffer>& out) -> std::optional<std::string> {
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
        [this](char kind, const PeerId& from, std::vector<Buffer>& frames) {
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
  void send_frames(const PeerId* to, Buffer head_buffer, std::optional<Buffer> body_buffer,
                   const Header& header) override {
    // Counted against the node's memory budget until sent, whichever way
    // the body goes (a body held for an arena reply is memory all the same).
    zmq::message_t head = admit_reply(*to, std::move(head_buffer), body_buffer, header);
    std::optional<zmq::message_t> body = to_optional_message(std::move(body_buffer));
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
  void answer_hello(const PeerId& from, std::vector<Buffer>& frames) {
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
  void answer_arena_offer(const PeerId& from, std::vector<Buffer>& frames) {
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

}  // namespace

std::unique_ptr<Listener> make_shm_listener(ShmTransport& transport, zmq::context_t& ctx, const std::string& address,
                                            EndpointOptions options) {
  return std::make_unique<ShmListener>(transport, ctx, address, std::move(options));
}

}  // namespace pstrain::shm_detail
