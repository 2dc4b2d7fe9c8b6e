// ShmTransport's Connection (common/transport/shm/shm_transport.h).
#include "common/base/errors.h"
#include "common/transport/shm/shm_layer.h"

namespace pstrain::shm_detail {

namespace {

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
        [this](char kind, const PeerId&, std::vector<Buffer>& frames,
               std::vector<Buffer>& out) -> std::optional<std::string> {
          if (kind != kArenaReply) return std::string("shared-memory arena data sent to a connection");
          return open_arena_reply(frames, out);
        },
        [this](char kind, const PeerId&, std::vector<Buffer>& frames) {
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

  void send_frames(const PeerId* /*to*/, Buffer head_buffer, std::optional<Buffer> body_buffer,
                   const Header& header) override {
    zmq::message_t head = to_message(std::move(head_buffer));
    std::optional<zmq::message_t> body = to_optional_message(std::move(body_buffer));
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
  void answer_arena_offer(std::vector<Buffer>& frames) {
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
  std::string open_arena_reply(std::vector<Buffer>& frames, std::vector<Buffer>& out) {
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

std::unique_ptr<Connection> make_shm_connection(ShmTransport& transport, zmq::context_t& ctx,
                                                const std::string& address, EndpointOptions options) {
  return std::make_unique<ShmConnection>(transport, ctx, address, std::move(options));
}

}  // namespace pstrain::shm_detail
