// The PS path's transports: the interface every node uses (Transport,
// Listener, Connection, PeerId, Envelope, Payload, wait_any), with no
// transport's own types in it: frames are Buffers (common/wire/buffer.h).
// The implementations live one folder each (docs/architecture.md,
// "Transports"):
//   common/transport/shm/   ShmTransport: ZeroMQ for messages, shared memory
//                           for a co-located worker's and server's tensors
//                           (cluster.transport = "shm", the default)
//   common/transport/zmq/   ZmqTransport (tcp://, ipc://, inproc://) and the
//                           ZeroMQ socket helpers both are built from
//   common/transport/fake/  FakeTransport: in memory with a fault plan, for
//                           tests (its own library, not in pstrain_common)
// make_transport (common/transport/make_transport.h) builds a node's from
// cluster.transport.
//
// Queues are bounded (SocketOptions::send_hwm / receive_hwm, in messages per
// peer connection), so no peer can make a node buffer without limit: a peer
// that sends faster than the node reads is slowed down (ZeroMQ stops
// reading its connection once the receive queue is full; nothing is dropped),
// and a node's memory for one peer's queued messages is at most
// receive_hwm x max_message_bytes. Sends never drop silently: a reply to a
// vanished peer or to a peer whose send queue is full because it does not
// read raises TransportError, which the scheduler and the servers count and
// drop for that peer (send_quietly), never blocking their loop. A Connection
// (worker, heartbeat) waits at most send_timeout for room in its queue, then
// raises TransportError.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <string>
#include <vector>

#include "common/observe/traffic_counters.h"
#include "common/wire/buffer.h"
#include "common/wire/protocol.h"

namespace pstrain {

struct SecurityContext;  // common/wire/security.h
class ZapHandler;        // common/wire/security.h
class Logger;            // common/base/log.h

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
  // CURVE (common/wire/security.h): ROUTER sockets become CURVE servers, the
  // others CURVE clients. Null or curve off: plain TCP. Must outlive the call.
  const SecurityContext* security = nullptr;
  int send_hwm = kDefaultSendHwm;
  int receive_hwm = kDefaultReceiveHwm;
  // Non-ROUTER sockets: the longest a send waits for room in a full queue.
  std::chrono::milliseconds send_timeout{120000};
};

// The payload frame of an outgoing message.
class Payload {
 public:
  Payload() = default;
  // Copies the bytes (control bodies, text).
  static Payload bytes(std::string_view data);
  // Zero-copy float data; `keep_alive` (may be null) is held until the
  // transport has sent the frame (ZeroMQ: until its I/O thread is done with it). Without one, the caller keeps `data` alive and unchanged
  // until the request's reply has arrived.
  static Payload floats(std::span<const float> data, std::shared_ptr<const void> keep_alive = nullptr);
  // Zero-copy bfloat16 data (common/base/bfloat16.h), kept alive as for floats().
  static Payload bfloat16(std::span<const std::uint16_t> data, std::shared_ptr<const void> keep_alive = nullptr);

  bool empty() const { return kind_ == Kind::kNone; }
  DType dtype() const;
  std::int64_t num_elems() const {
    return kind_ == Kind::kFloats ? static_cast<std::int64_t>(floats_.size())
           : kind_ == Kind::kBFloat16 ? static_cast<std::int64_t>(bf16_.size()) : 0;
  }
  // The frame to send (zero-copy for floats and bfloat16, keeping keep_alive).
  Buffer to_buffer() &&;

 private:
  enum class Kind { kNone, kBytes, kFloats, kBFloat16 };
  Kind kind_ = Kind::kNone;
  std::string bytes_;
  std::span<const float> floats_;
  std::span<const std::uint16_t> bf16_;
  std::shared_ptr<const void> keep_alive_;
};

// ---------------------------------------------------------------------------
// The transport interface (docs/architecture.md, "Transports").
//
// A node owns one Transport (ShmTransport, the default, or ZmqTransport:
// make_transport from cluster.transport; FakeTransport in tests) and makes
// its endpoints from it: a Listener
// (ROUTER-like: many peers connect; receives (peer, message), replies to a
// peer) and Connections (DEALER-like: one peer). wait_any() waits on several
// endpoints of one transport at once. Every implementation hands received
// frames to Endpoint, which decodes them with decode_message (the one place
// protocol validation happens) and counts traffic; implementations only move
// frames (Buffer: bytes and their keep-alive, zero-copy with Payload's
// keep-alive on the way out, a received ZeroMQ message or a shared-memory
// slot held open on the way in) and keep the guarantees below.
//
// Guarantees every transport keeps:
// - bounded queues: EndpointOptions::socket.send_hwm / receive_hwm messages
//   per peer link; max_message_bytes per frame (bigger: dropped, the peer
//   disconnected, never buffered);
// - Listener::send never waits: a vanished peer, a full queue or the node's
//   memory budget (set_memory_limits) raises TransportError (the caller
//   counts it and goes on);
// - Connection::send waits at most socket.send_timeout, then TransportError;
// - Envelope::user_id: the authenticated key's name (CURVE), else empty.
// ---------------------------------------------------------------------------

// "connection 00a1b2c3d4": a peer's routing id in hex (at most 16 bytes of
// it), for messages and per-peer limits.
std::string connection_name(std::string_view routing_id);

// Who sent a message to a Listener, and where its reply goes: opaque. Its
// bytes are the identity the peer's Connection chose
// (EndpointOptions::identity), or one the transport made up.
class PeerId {
 public:
  PeerId() = default;
  explicit PeerId(std::string bytes) : bytes_(std::move(bytes)) {}
  const std::string& bytes() const { return bytes_; }
  bool empty() const { return bytes_.empty(); }
  // For messages and per-peer limits: "connection 00a1b2c3d4" (hex, <= 16 bytes).
  std::string name() const;
  auto operator<=>(const PeerId&) const = default;

 private:
  std::string bytes_;
};

// A received, validated message and who sent it (Listener: `from`; a
// Connection's messages come from its one peer, `from` empty).
struct Envelope {
  PeerId from;
  Message message;
  // CURVE: the ZAP user id of the sender's key ("server", "worker",
  // "worker-R": common/wire/security.h); empty on plain connections.
  std::string user_id;
};

// A node's memory budget for unsent replies (Listener::set_memory_limits;
// docs/architecture.md, "Memory budget and floods"), in bytes; 0 = no limit.
// Members (set_members / add_member) are held to budget_bytes; with
// strangers_bytes set, the connections that are not members are held to that
// pool of their own (and never count against the members' budget), so
// strangers are shed first: no flood of theirs costs a member a reply.
struct MemoryLimits {
  std::int64_t budget_bytes = 0;     // the members' (every connection's when strangers_bytes is 0)
  std::int64_t stranger_bytes = 0;   // per connection not among set_members' (once set)
  std::int64_t strangers_bytes = 0;  // all those connections together (0: they share budget_bytes)
  bool operator==(const MemoryLimits&) const = default;
};

// The most a listener under `limits` ever holds of unsent replies: a
// connection under its share still gets its reply up to twice a budget
// (common/transport/zmq/zmq_reply_budget.h), so 2 x (budget_bytes +
// strangers_bytes); 0 when budget_bytes is 0 (no bound in bytes).
std::int64_t unsent_bound(const MemoryLimits& limits);

struct EndpointOptions {
  SocketOptions socket;                // queue bounds, frame cap, send timeout, CURVE
  DecodeLimits limits;                 // what decode_message accepts
  std::string identity;                // Connection: the PeerId its listener sees (empty: the transport's)
  TrafficCounters* traffic = nullptr;  // the node's byte counters (header and payload bytes); may be null
  // A Connection that will carry tensors (a worker's to a server): a
  // transport may set up a faster path for it (ShmTransport: a shared-memory
  // segment when the listener is on the same host). Others ignore it.
  bool carries_tensors = false;
};

class Transport;

class Endpoint {
 public:
  Endpoint(Transport& transport, EndpointOptions options) : transport_(transport), options_(std::move(options)) {}
  virtual ~Endpoint() = default;
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  Transport& transport() const { return transport_; }
  const EndpointOptions& options() const { return options_; }

 protected:
  // What an implementation delivers: the frames of one message (without any
  // routing frame), its sender and the authenticated key's name.
  struct Frames {
    PeerId from;
    std::vector<Buffer> frames;
    std::string user_id;
    // Set when the transport itself found the message malformed (ShmTransport:
    // a descriptor that does not check out): receive raises ProtocolError with
    // this text, the sender in bad_from, as for frames decode_message refuses.
    std::string protocol_error;
  };
  // One whole message if one arrives within `timeout` (0: do not wait).
  virtual std::optional<Frames> receive_frames(std::chrono::milliseconds timeout) = 0;
  // Sends header + optional body frame (to = null on a Connection). Throws
  // TransportError (describe(header) names the message).
  virtual void send_frames(const PeerId* to, Buffer head, std::optional<Buffer> body,
                           const Header& header) = 0;

  // The shared halves of send and receive: encoding, traffic, decoding.
  void send_impl(const PeerId* to, Header header, Payload payload);
  std::optional<Envelope> receive_impl(std::chrono::milliseconds timeout, PeerId* bad_from);

 private:
  Transport& transport_;
  EndpointOptions options_;
};

// ROUTER-like: bound at an address, many peers.
class Listener : public Endpoint {
 public:
  using Endpoint::Endpoint;
  // The address actually bound ("tcp://127.0.0.1:*" -> "tcp://127.0.0.1:40123").
  virtual const std::string& address() const = 0;
  // Never waits; TransportError when `to` has gone or its queue is full.
  void send(const PeerId& to, Header header, Payload payload = {}) { send_impl(&to, header, std::move(payload)); }
  // An error reply to `request` (status + text).
  void send_error(const PeerId& to, const Header& request, Role my_role, std::int32_t my_rank, Status status,
                  const std::string& text);
  // A message if one is ready within `timeout`. A message failing validation
  // raises ProtocolError once it is consumed, its sender in `bad_from`.
  std::optional<Envelope> receive(std::chrono::milliseconds timeout, PeerId* bad_from = nullptr) {
    return receive_impl(timeout, bad_from);
  }

  // The memory budget (MemoryLimits): from now on a send that would go over
  // it, or over a stranger's share, raises TransportError saying so, as for
  // a full queue. Transports without one (FakeTransport) ignore it.
  virtual void set_memory_limits(const MemoryLimits& /*limits*/) {}
  // The node's own connections (a server's workers); every other one is a
  // stranger from now on. Until called, none is.
  virtual void set_members(const std::vector<PeerId>& /*members*/) {}
  // One more member (a node that registered: the scheduler's), keeping the
  // others; makes every connection not added a stranger if none was set.
  virtual void add_member(const PeerId& /*member*/) {}
  // Bytes of replies sent and not yet gone out (0 where not counted).
  // Safe from any thread (a test's or a fuzzer's watch), as is unsent_limit().
  virtual std::int64_t unsent_bytes() const { return 0; }
  // unsent_bound of the limits set now (0: none).
  virtual std::int64_t unsent_limit() const { return 0; }
  // Replies refused by the budget so far.
  virtual std::int64_t shed_replies() const { return 0; }
  // Call from the loop now and then: once the unsent replies have drained
  // after a peak, hands the freed memory back to the OS. True when it did.
  virtual bool give_back_memory() { return false; }
};

// DEALER-like: connected to one listener.
class Connection : public Endpoint {
 public:
  using Endpoint::Endpoint;
  // Waits at most options().socket.send_timeout for room, then TransportError.
  void send(Header header, Payload payload = {}) { send_impl(nullptr, header, std::move(payload)); }
  std::optional<Envelope> receive(std::chrono::milliseconds timeout) { return receive_impl(timeout, nullptr); }
  // Closes at once, dropping whatever is still queued to send (a peer that
  // failed: its replacement gets a new Connection).
  virtual void abandon() = 0;
};

struct SendFloats {
  std::span<float> values;
  std::shared_ptr<void> owner;
};

class Transport {
 public:
  virtual ~Transport() = default;
  // Binds; throws TransportError naming the address.
  virtual std::unique_ptr<Listener> listen(const std::string& address, EndpointOptions options) = 0;
  // Connects (may complete later, as ZeroMQ's connect does); throws TransportError.
  virtual std::unique_ptr<Connection> connect(const std::string& address, EndpointOptions options) = 0;
  // Which of `endpoints` (all made by this transport) have a message ready,
  // waiting up to `timeout` for at least one.
  virtual std::vector<bool> wait_any(std::span<Endpoint* const> endpoints, std::chrono::milliseconds timeout) = 0;
  // A binding node's authenticator when `security` has CURVE on (null
  // otherwise); keep it alive while the node's Listener is. Transports
  // without CURVE throw ConfigError for security with curve on.
  virtual std::unique_ptr<ZapHandler> authenticate(const SecurityContext* security, Logger& log) = 0;
  // "shm", "zmq", "fake" for messages and test names.
  virtual std::string_view kind() const = 0;
  // Zeroed memory for `count` floats this node sends again and again (a
  // worker's gradients), alive while `owner` is. Bodies sent zero-copy from it
  // (Payload::floats) may then be read in place by a co-located peer
  // (ShmTransport: the memory is an arena such a peer maps read-only), so
  // the Payload contract matters all the more: unchanged until the reply.
  // Here: ordinary memory.
  virtual SendFloats allocate_send_floats(std::size_t count);
  // Received bytes that can be mapped instead of copied: where `frame` (a
  // payload this transport handed up) lies in pages its sender keeps
  // unchanged while the frame is held (ShmTransport: a pull reply in the
  // server's arena, held until the frame goes), the id of that memory (never
  // 0, unique in this process); else 0. Here: 0.
  virtual std::uint64_t shared_pages_of(Buffer& frame) const;
  // Maps `bytes` of `frame` from `offset` read-only at `dest`, in place of
  // what was mapped there: the same pages, seen at a second address (both
  // frame.data() + offset and dest page aligned, `bytes` whole pages). False
  // when it cannot (not such a frame, misaligned, the system refused): then
  // what was at `dest` may be unmapped, and the caller maps memory back
  // before it copies. Here: false.
  virtual bool map_shared_pages(Buffer& frame, std::size_t offset, void* dest, std::size_t bytes);
};

// Waits on endpoints of one transport (the first one's): wait_any over it.
std::vector<bool> wait_any(std::span<Endpoint* const> endpoints, std::chrono::milliseconds timeout);

}  // namespace pstrain
