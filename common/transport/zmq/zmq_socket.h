// The ZeroMQ socket helpers ZmqTransport and ShmTransport are built from
// (common/transport/zmq/zmq_transport.h, common/transport/shm/shm_transport.h);
// tests, benchmarks and fuzzers that play hostile peers use them directly.
// Nodes use the interface, common/transport/transport.h.
//
// One code path for tcp://, ipc:// and inproc:// (inproc needs the peers to
// share one zmq::context_t: there is no process-wide context).
// Sockets are not thread-safe: each belongs to one thread.
//
// ROUTER sockets are "mandatory" and send_message does not wait on them, so a
// reply to a vanished peer (EHOSTUNREACH) or to a peer whose send queue is
// full (EAGAIN) raises TransportError; a DEALER waits at most send_timeout for
// room in its queue (ZMQ_SNDTIMEO), then raises TransportError. A peer that
// sends faster than the node reads is slowed by TCP: ZeroMQ stops reading its
// connection once the receive queue (receive_hwm) is full.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "common/transport/transport.h"

namespace pstrain {

// A received frame as a Buffer (no copy: the message moves inside it) and a
// Buffer as a frame to send (no copy: a frame this layer made is taken back;
// borrowed bytes are sent in place; any other owner goes with the frame).
Buffer to_buffer(zmq::message_t&& frame);
zmq::message_t to_message(Buffer&& buffer);
std::optional<zmq::message_t> to_optional_message(std::optional<Buffer>&& buffer);

// A socket with pstrain's options applied.
zmq::socket_t make_socket(zmq::context_t& ctx, zmq::socket_type type, const SocketOptions& options = {});

// Binds and returns the endpoint actually bound (ephemeral ports resolved:
// "tcp://127.0.0.1:*" -> "tcp://127.0.0.1:40123"). Throws TransportError.
std::string bind_socket(zmq::socket_t& socket, const std::string& endpoint);
void connect_socket(zmq::socket_t& socket, const std::string& endpoint);

// Traffic: send_message, receive_message and send_error add the bytes of the
// header and payload frames they move to `traffic` when one is given (the
// node's counters, common/observe/traffic_counters.h); routing ids are not counted.

// Sends [routing_id]? header [payload]? . The header's dtype and num_elems
// are set from the payload. Throws TransportError.
void send_message(zmq::socket_t& socket, const zmq::message_t* routing_id, Header header, Payload payload = {},
                  TrafficCounters* traffic = nullptr);

// The frame layer under send_message / receive_message (ZmqTransport uses it
// too): sends [routing_id]? head [body]? with the never-wait / send-timeout
// rules above (TransportError naming `header`); receives one whole multipart
// message within `timeout` (0 = do not wait), undecoded.
void send_frames_raw(zmq::socket_t& socket, const zmq::message_t* routing_id, zmq::message_t head,
                     std::optional<zmq::message_t> body, const Header& header);
// The same rules for any number of frames (at least one), sent as one message.
void send_parts_raw(zmq::socket_t& socket, const zmq::message_t* routing_id, std::span<zmq::message_t> parts,
                    const Header& header);
// Routed (ROUTER): the first frame is the sender's routing id, and the ZAP
// user id is read from the second.
struct RawFrames {
  std::vector<Buffer> frames;
  std::string user_id;  // CURVE: the ZAP user id the frames carry; empty on plain connections
};
std::optional<RawFrames> receive_frames_raw(zmq::socket_t& socket, std::chrono::milliseconds timeout,
                                            bool routed = false);

// A received message and, on ROUTER sockets, who sent it (the raw ZeroMQ
// layer; nodes get the transport-neutral Envelope below).
struct ZmqEnvelope {
  zmq::message_t routing_id;
  Message message;
  // CURVE: the ZAP user id of the sender's key ("server", "worker",
  // "worker-R": common/wire/security.h); empty on plain connections.
  std::string user_id;
};

// Receives one whole multipart message if one is ready within `timeout`
// (0 = do not wait). Frames that fail validation raise ProtocolError after
// the whole multipart message was consumed (the socket stays usable), with
// the routing id available through `bad_routing_id` so the caller can reply.
std::optional<ZmqEnvelope> receive_message(zmq::socket_t& socket, bool has_routing_id, std::chrono::milliseconds timeout,
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
