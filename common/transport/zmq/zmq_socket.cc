#include "common/transport/zmq/zmq_socket.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <climits>

#include "common/base/errors.h"
#include "common/transport/zmq/zmq_curve.h"

namespace pstrain {

namespace {
void release_buffer(void* /*data*/, void* hint) { delete static_cast<Buffer*>(hint); }
void release_nothing(void* /*data*/, void* /*hint*/) {}

// The ZAP user id a frame of an authenticated connection carries ("" if none).
std::string frame_user_id(const zmq::message_t& frame) {
  const char* user = zmq_msg_gets(frame.handle(), "User-Id");
  return user != nullptr ? std::string(user) : std::string();
}
}  // namespace

Buffer to_buffer(zmq::message_t&& frame) {
  return Buffer::hold(std::move(frame), [](const zmq::message_t& m) {
    return std::span<const std::byte>(static_cast<const std::byte*>(m.data()), m.size());
  });
}

zmq::message_t to_message(Buffer&& buffer) {
  if (zmq::message_t* own = buffer.owner_if<zmq::message_t>()) return std::move(*own);
  if (buffer.size() == 0) return zmq::message_t();
  if (buffer.is_inline()) return zmq::message_t(buffer.data(), buffer.size());  // a few bytes: copied
  void* data = const_cast<void*>(buffer.data());
  if (buffer.borrowed()) return zmq::message_t(data, buffer.size(), &release_nothing, nullptr);
  auto* held = new Buffer(std::move(buffer));  // the owner goes with the frame
  return zmq::message_t(const_cast<void*>(held->data()), held->size(), &release_buffer, held);
}

std::optional<zmq::message_t> to_optional_message(std::optional<Buffer>&& buffer) {
  if (!buffer) return std::nullopt;
  return to_message(std::move(*buffer));
}

zmq::socket_t make_socket(zmq::context_t& ctx, zmq::socket_type type, const SocketOptions& options) {
  try {
    zmq::socket_t socket(ctx, type);
    socket.set(zmq::sockopt::sndhwm, options.send_hwm);
    socket.set(zmq::sockopt::rcvhwm, options.receive_hwm);
    socket.set(zmq::sockopt::linger, static_cast<int>(options.linger.count()));
    // Each frame is capped; a peer sending more is disconnected by ZeroMQ.
    socket.set(zmq::sockopt::maxmsgsize, options.max_message_bytes + 4096);
    const bool router = type == zmq::socket_type::router;
    if (router) {
      socket.set(zmq::sockopt::router_mandatory, 1);
    } else {
      socket.set(zmq::sockopt::sndtimeo, static_cast<int>(options.send_timeout.count()));
    }
    if (options.security != nullptr) apply_curve(*options.security, socket, router);
    return socket;
  } catch (const zmq::error_t& e) {
    throw TransportError(std::string("creating a socket: ") + e.what());
  }
}

std::string bind_socket(zmq::socket_t& socket, const std::string& endpoint) {
  try {
    socket.bind(endpoint);
    return socket.get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    throw TransportError("bind to " + endpoint + ": " + e.what());
  }
}

void connect_socket(zmq::socket_t& socket, const std::string& endpoint) {
  try {
    socket.connect(endpoint);
  } catch (const zmq::error_t& e) {
    throw TransportError("connect to " + endpoint + ": " + e.what());
  }
}

namespace {
// A blocking send or receive that a signal interrupts fails with EINTR: on Linux even a signal the
// process does not handle does this to a wait resumed by SIGCONT after SIGSTOP (signal(7)), and a
// fuzzer's alarm does it to every wait. Interrupted is not failed: the call is made again (a send
// leaves its message untouched when it fails).
bool interrupted(const zmq::error_t& e) { return e.num() == EINTR; }

zmq::send_result_t send_part(zmq::socket_t& socket, zmq::message_t& part, zmq::send_flags flags) {
  while (true) {
    try {
      return socket.send(part, flags);
    } catch (const zmq::error_t& e) {
      if (!interrupted(e)) throw;
    }
  }
}

// A DEALER's send found its queue full for send_timeout (ZMQ_SNDTIMEO).
[[noreturn]] void throw_send_timeout(const Header& header) {
  throw TransportError("send of " + std::string(to_string(header.type)) + " (key " + std::to_string(header.key) +
                       "): the send queue stayed full (the peer does not read)");
}
}  // namespace

void send_parts_raw(zmq::socket_t& socket, const zmq::message_t* routing_id, std::span<zmq::message_t> parts,
                    const Header& header) {
  if (parts.empty()) throw TransportError("send of " + std::string(to_string(header.type)) + ": no frames");
  try {
    if (routing_id != nullptr) {
      // ROUTER: never wait for a peer. A full queue (a peer that does not
      // read) is EAGAIN, reported like a vanished peer. HWMs count whole
      // messages, so once the first frame is taken the rest are too.
      zmq::message_t id = copy_frame(*routing_id);
      if (!send_part(socket, id, zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
        throw TransportError("send of " + std::string(to_string(header.type)) + " (key " +
                             std::to_string(header.key) + "): the peer's queue is full (it does not read)");
      }
    }
    for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
      if (!send_part(socket, parts[i], zmq::send_flags::sndmore)) {
        if (i == 0) throw_send_timeout(header);
      }
    }
    if (!send_part(socket, parts.back(), zmq::send_flags::none) && parts.size() == 1) throw_send_timeout(header);
  } catch (const zmq::error_t& e) {
    throw TransportError("send of " + std::string(to_string(header.type)) + " (key " + std::to_string(header.key) +
                         "): " + e.what());
  }
}

void send_frames_raw(zmq::socket_t& socket, const zmq::message_t* routing_id, zmq::message_t head,
                     std::optional<zmq::message_t> body, const Header& header) {
  if (!body) {
    send_parts_raw(socket, routing_id, std::span<zmq::message_t>(&head, 1), header);
    return;
  }
  std::array<zmq::message_t, 2> parts{std::move(head), std::move(*body)};
  send_parts_raw(socket, routing_id, parts, header);
}

void send_message(zmq::socket_t& socket, const zmq::message_t* routing_id, Header header, Payload payload,
                  TrafficCounters* traffic) {
  header.dtype = payload.dtype();
  header.num_elems = payload.num_elems();
  zmq::message_t head = to_message(encode_header(header));
  std::size_t bytes = head.size();
  std::optional<zmq::message_t> body;
  if (!payload.empty()) {
    body = to_message(std::move(payload).to_buffer());
    bytes += body->size();
  }
  send_frames_raw(socket, routing_id, std::move(head), std::move(body), header);
  if (traffic != nullptr) traffic->add_sent(bytes);
}

std::optional<RawFrames> receive_frames_raw(zmq::socket_t& socket, std::chrono::milliseconds timeout, bool routed) {
  // A wait is a blocking receive bounded by ZMQ_RCVTIMEO, not zmq_poll and then a receive: a queued
  // message is taken with no system call, and a wait costs ZeroMQ's one sleep (zmq_poll added a
  // poll and a mailbox check before it and after it: about half of a woken node's system calls).
  const bool wait = timeout.count() > 0;
  // Only a wait reads the clock (an EINTR shortens what is left of it).
  const auto deadline = wait ? std::chrono::steady_clock::now() + timeout : std::chrono::steady_clock::time_point{};
  RawFrames got;
  got.frames.reserve(4);  // a routing id, a header, a body: one allocation, not one per frame
  try {
    if (wait) socket.set(zmq::sockopt::rcvtimeo, static_cast<int>(std::min<std::int64_t>(timeout.count(), INT_MAX)));
    while (true) {
      zmq::message_t frame;
      const auto flags = got.frames.empty() && !wait ? zmq::recv_flags::dontwait : zmq::recv_flags::none;
      try {
        if (!socket.recv(frame, flags)) return std::nullopt;
      } catch (const zmq::error_t& e) {
        if (!interrupted(e)) throw;
        // The rest of a message is already here (ZeroMQ delivers its frames together); a wait for
        // its first frame goes on for the time it has left.
        if (got.frames.empty() && wait) {
          const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
          if (left.count() <= 0) return std::nullopt;
          socket.set(zmq::sockopt::rcvtimeo, static_cast<int>(std::min<std::int64_t>(left.count(), INT_MAX)));
        }
        continue;
      }
      const bool more = frame.more();
      // The ZAP user id rides on every frame: read from the first after any routing id.
      if (got.frames.size() == (routed ? 1U : 0U)) got.user_id = frame_user_id(frame);
      got.frames.push_back(to_buffer(std::move(frame)));
      if (!more) break;
    }
  } catch (const zmq::error_t& e) {
    throw TransportError(std::string("receive: ") + e.what());
  }
  return got;
}

std::optional<ZmqEnvelope> receive_message(zmq::socket_t& socket, bool has_routing_id, std::chrono::milliseconds timeout,
                                        const DecodeLimits& limits, zmq::message_t* bad_routing_id,
                                        TrafficCounters* traffic) {
  std::optional<RawFrames> got = receive_frames_raw(socket, timeout, has_routing_id);
  if (!got) return std::nullopt;
  std::vector<Buffer>& frames = got->frames;
  ZmqEnvelope env;
  if (has_routing_id) {
    env.routing_id = zmq::message_t(frames.front().data(), frames.front().size());
    frames.erase(frames.begin());
    if (bad_routing_id != nullptr) *bad_routing_id = copy_frame(env.routing_id);
  }
  if (traffic != nullptr) {  // counted before decoding: malformed bytes arrived all the same
    std::size_t bytes = 0;
    for (const Buffer& frame : frames) bytes += frame.size();
    traffic->add_received(bytes);
  }
  env.user_id = std::move(got->user_id);
  env.message = decode_message(frames, limits);
  return env;
}

void send_error(zmq::socket_t& socket, const zmq::message_t* routing_id, const Header& request, Role my_role,
                std::int32_t my_rank, Status status, const std::string& text, TrafficCounters* traffic) {
  Header reply;
  reply.type = MsgType::kError;
  reply.role = my_role;
  reply.sender = my_rank;
  reply.status = status;
  reply.request_id = request.request_id;
  reply.key = request.key;
  reply.step = request.step;
  send_message(socket, routing_id, reply, Payload::bytes(text.substr(0, kMaxBodyBytes)), traffic);
}

zmq::message_t copy_frame(const zmq::message_t& frame) { return zmq::message_t(frame.data(), frame.size()); }

std::string connection_name(const zmq::message_t& routing_id) {
  return connection_name(std::string_view(static_cast<const char*>(routing_id.data()), routing_id.size()));
}

}  // namespace pstrain
