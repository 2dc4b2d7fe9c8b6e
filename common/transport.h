// Socket helpers over cppzmq. One code path for tcp://, ipc:// and inproc://
// (inproc needs the peers to share one zmq::context_t, which the caller owns:
// there is no process-wide context).
//
// Sockets are not thread-safe: each belongs to one thread.
//
// Queues are bounded (SocketOptions::send_hwm / receive_hwm, in messages per
// peer connection), so no peer can make a node buffer without limit: a peer
// that sends faster than the node reads is slowed by TCP (ZeroMQ stops
// reading its connection once the receive queue is full; nothing is dropped),
// and a node's memory for one peer's queued messages is at most
// receive_hwm x max_message_bytes. Sends never drop silently: ROUTER sockets
// are "mandatory" and send_message does not wait on them, so a reply to a
// vanished peer (EHOSTUNREACH) or to a peer whose send queue is full because
// it does not read (EAGAIN) raises TransportError, which the scheduler and
// the servers count and drop for that peer (send_quietly), never blocking
// their loop. A DEALER (worker, heartbeat) waits at most send_timeout for
// room in its queue, then raises TransportError.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "common/protocol.h"
#include "common/traffic_counters.h"

namespace pstrain {

struct SecurityContext;  // common/security.h

// Default queue bounds, in whole messages per peer connection. ZeroMQ's own
// default (1000) for receiving; replies get more room. A worker's KV client
// raises both on its sockets to 4 x its chunks on that server (+64), so the
// replies of its whole pipeline always fit in its own receive queue and never
// back up into the server's bounded send queue (where they would be dropped).
inline constexpr int kDefaultReceiveHwm = 1000;
inline constexpr int kDefaultSendHwm = 4000;
// A server's send queue per connection (server/server.cc): room for the
// replies of a worker pipelining a request for each of up to 16,000 chunks
// held by that server (16 GB at the default 1 MiB partition).
inline constexpr int kServerSendHwm = 1 << 16;

struct SocketOptions {
  std::int64_t max_message_bytes = std::int64_t{1} << 30;  // ZMQ_MAXMSGSIZE on receiving sockets
  std::chrono::milliseconds linger{2000};                 // how long close() may flush
  // CURVE (common/security.h): ROUTER sockets become CURVE servers, the
  // others CURVE clients. Null or curve off: plain TCP. Must outlive the call.
  const SecurityContext* security = nullptr;
  int send_hwm = kDefaultSendHwm;
  int receive_hwm = kDefaultReceiveHwm;
  // Non-ROUTER sockets: the longest a send waits for room in a full queue.
  std::chrono::milliseconds send_timeout{120000};
};

// A socket with pstrain's options applied.
zmq::socket_t make_socket(zmq::context_t& ctx, zmq::socket_type type, const SocketOptions& options = {});

// Binds and returns the endpoint actually bound (ephemeral ports resolved:
// "tcp://127.0.0.1:*" -> "tcp://127.0.0.1:40123"). Throws TransportError.
std::string bind_socket(zmq::socket_t& socket, const std::string& endpoint);
void connect_socket(zmq::socket_t& socket, const std::string& endpoint);

// The payload frame of an outgoing message.
class Payload {
 public:
  Payload() = default;
  // Copies the bytes (control bodies, text).
  static Payload bytes(std::string_view data);
  // Zero-copy float data; `keep_alive` (may be null) is held until ZeroMQ has
  // sent the frame. Without one, the caller keeps `data` alive and unchanged
  // until the request's reply has arrived.
  static Payload floats(std::span<const float> data, std::shared_ptr<const void> keep_alive = nullptr);
  // Zero-copy bfloat16 data (common/bfloat16.h), kept alive as for floats().
  static Payload bfloat16(std::span<const std::uint16_t> data, std::shared_ptr<const void> keep_alive = nullptr);

  bool empty() const { return kind_ == Kind::kNone; }
  DType dtype() const;
  std::int64_t num_elems() const {
    return kind_ == Kind::kFloats ? static_cast<std::int64_t>(floats_.size())
           : kind_ == Kind::kBFloat16 ? static_cast<std::int64_t>(bf16_.size()) : 0;
  }
  zmq::message_t to_frame() &&;

 private:
  enum class Kind { kNone, kBytes, kFloats, kBFloat16 };
  Kind kind_ = Kind::kNone;
  std::string bytes_;
  std::span<const float> floats_;
  std::span<const std::uint16_t> bf16_;
  std::shared_ptr<const void> keep_alive_;
};

// Traffic: send_message, receive_message and send_error add the bytes of the
// header and payload frames they move to `traffic` when one is given (the
// node's counters, common/traffic_counters.h); routing ids are not counted.

// Sends [routing_id]? header [payload]? . The header's dtype and num_elems
// are set from the payload. Throws TransportError.
void send_message(zmq::socket_t& socket, const zmq::message_t* routing_id, Header header, Payload payload = {},
                  TrafficCounters* traffic = nullptr);

// A received message and, on ROUTER sockets, who sent it.
struct Envelope {
  zmq::message_t routing_id;
  Message message;
  // CURVE: the ZAP user id of the sender's key ("server", "worker",
  // "worker-R": common/security.h); empty on plain connections.
  std::string user_id;
};

// Receives one whole multipart message if one is ready within `timeout`
// (0 = do not wait). Frames that fail validation raise ProtocolError after
// the whole multipart message was consumed (the socket stays usable), with
// the routing id available through `bad_routing_id` so the caller can reply.
std::optional<Envelope> receive_message(zmq::socket_t& socket, bool has_routing_id, std::chrono::milliseconds timeout,
                                        const DecodeLimits& limits, zmq::message_t* bad_routing_id = nullptr,
                                        TrafficCounters* traffic = nullptr);

// Sends an error reply for request `request` (status + text body).
void send_error(zmq::socket_t& socket, const zmq::message_t* routing_id, const Header& request, Role my_role,
                std::int32_t my_rank, Status status, const std::string& text, TrafficCounters* traffic = nullptr);

// Copies a routing id frame (ROUTER replies may outlive the received message).
zmq::message_t copy_frame(const zmq::message_t& frame);

// A peer's connection for messages and per-peer limits: "connection 00a1b2c3d4"
// (the routing id in hex, at most 16 bytes of it).
std::string connection_name(const zmq::message_t& routing_id);

}  // namespace pstrain
