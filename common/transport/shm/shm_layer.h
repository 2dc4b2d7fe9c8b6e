// The shared-memory layer's pieces that ShmTransport's listener and
// connection share (common/transport/shm/shm_transport.h describes the
// layer and its messages): the tag frames, opening descriptors into frames
// that point in place, sending through a slot or an arena, and the receive
// loop that routes the layer's own messages. Internal to common/transport/shm/.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "common/transport/shm/shm_segment.h"
#include "common/transport/shm/shm_transport.h"
#include "common/transport/zmq/zmq_endpoint.h"
#include "common/transport/zmq/zmq_socket.h"

namespace pstrain::shm_detail {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

inline constexpr std::size_t kTagBytes = 8;
inline constexpr char kTagPrefix[] = "PSTRSHM";  // 7 bytes, then the kind
inline constexpr char kHello = 'H', kYes = 'A', kNo = 'R', kData = 'D';
inline constexpr char kArenaOffer = 'G', kArenaYes = 'B', kArenaNo = 'N', kArenaData = 'P', kArenaReply = 'W';
inline constexpr std::size_t kMaxArenasPerPeer = 8;
inline constexpr std::size_t kMaxReasonBytes = 512;

// An 8-byte tag frame: "PSTRSHM" + kind.
zmq::message_t tag(char kind);
// The kind of a shared-memory layer message, or 0 for an ordinary one.
char tag_kind(const Buffer& frame);
// This host's boot and this process's pid namespace: a peer can attach only
// with both the same (it asks the creator's pid for the memfd: shm_memfd.h).
std::string read_boot_id();
// Header for messages about the layer's own frames (TransportError texts).
Header layer_header();

// [tag, header, ...] -> [header, payload]: the payload frame points at
// `bytes` in place, and `held` (what keeps them readable) goes with it.
template <class Held>
void hand_up(std::vector<Buffer>& frames, std::span<const std::byte> bytes, std::unique_ptr<Held> held,
             std::vector<Buffer>& out) {
  Buffer body = Buffer::hold(std::move(held), [bytes](const std::unique_ptr<Held>&) { return bytes; });
  out.clear();
  out.push_back(std::move(frames[1]));
  out.push_back(std::move(body));
}

// [tag 'D', header, descriptor] -> [header, payload in place], or the reason
// it cannot be.
std::string open_data(const std::shared_ptr<ShmSegment>& segment, std::vector<Buffer>& frames,
                      std::vector<Buffer>& out);
// [tag 'P', header, arena descriptor] -> [header, payload in place, the
// arena held mapped while the frame lives], or the reason it cannot be;
// nullopt when the arena is not one `arenas` holds (the caller drops the
// message and tells the sender no).
std::optional<std::string> open_arena_data(const std::map<std::uint64_t, std::shared_ptr<ShmArena>>* arenas,
                                           std::vector<Buffer>& frames, std::vector<Buffer>& out);

// A reply's body in the listener's arena, and the slot standing for it:
// released (the listener may write those weights again) once the frame goes.
struct HeldArenaReply {
  std::shared_ptr<ShmSegment> segment;  // outlives the slot (members go in reverse order)
  ShmSegment::ReadSlot slot;
  std::shared_ptr<ShmArena> arena;
};

// An 8-byte little-endian arena id (and what follows it: a refusal's reason).
std::uint64_t arena_id_of(const Buffer& frame);
zmq::message_t arena_id_frame(std::uint64_t id, const std::string& then = {});
// An arena offer [tag 'G', address]: its arena mapped read-only into `held`
// (at most kMaxArenasPerPeer; `id` gets the offered id), or why not. The
// caller has checked that the offer's connection shares a segment with it.
std::string accept_arena_offer(const std::vector<Buffer>& frames,
                               std::map<std::uint64_t, std::shared_ptr<ShmArena>>& held, std::uint64_t& id);
// The answer to an arena offer: yes [tag 'B', id] or no [tag 'N', id + reason].
std::array<zmq::message_t, 2> arena_answer(ShmTransport& transport, std::uint64_t id, const std::string& refusal);
// Sends head + body as a descriptor into `arena` (the body lies in it whole).
void send_through_arena(ShmTransport& transport, const ShmArena& arena, zmq::socket_t& socket, zmq::message_t& head,
                        const zmq::message_t& body, const Header& header);
// Sends head + body through a free slot of `segment`, or returns false (the
// caller sends inline; `meddled` set when the peer broke the slot's state, so
// the caller drops the segment). TransportError from ZeroMQ after the slot
// was taken gives the slot back first.
bool send_through_segment(ShmTransport& transport, ShmSegment* segment, zmq::socket_t& socket,
                          const zmq::message_t* routing_id, zmq::message_t& head, std::optional<zmq::message_t>& body,
                          const Header& header, bool& meddled);
std::chrono::milliseconds left_until(Clock::time_point deadline);

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
    std::optional<RawFrames> raw = receive_frames_raw(socket, left_until(deadline), routed);
    if (!raw) return std::nullopt;
    std::vector<Buffer>* got = &raw->frames;
    Frames f;
    if (routed) {
      f.from = PeerId(got->front().to_string());
      got->erase(got->begin());
    }
    f.user_id = std::move(raw->user_id);
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

// The endpoints (shm_listener.cc, shm_connection.cc).
std::unique_ptr<Listener> make_shm_listener(ShmTransport& transport, zmq::context_t& ctx, const std::string& address,
                                            EndpointOptions options);
std::unique_ptr<Connection> make_shm_connection(ShmTransport& transport, zmq::context_t& ctx,
                                                const std::string& address, EndpointOptions options);

}  // namespace pstrain::shm_detail
