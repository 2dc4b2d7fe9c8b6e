#include "common/transport/transport.h"

#include <cstdlib>

#include <array>

#include "common/base/errors.h"
#include "common/wire/security.h"

namespace pstrain {

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
    if (options.security != nullptr) options.security->apply(socket, router);
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

Payload Payload::bytes(std::string_view data) {
  Payload p;
  p.kind_ = Kind::kBytes;
  p.bytes_ = std::string(data);
  return p;
}

Payload Payload::floats(std::span<const float> data, std::shared_ptr<const void> keep_alive) {
  Payload p;
  p.kind_ = Kind::kFloats;
  p.floats_ = data;
  p.keep_alive_ = std::move(keep_alive);
  return p;
}

Payload Payload::bfloat16(std::span<const std::uint16_t> data, std::shared_ptr<const void> keep_alive) {
  Payload p;
  p.kind_ = Kind::kBFloat16;
  p.bf16_ = data;
  p.keep_alive_ = std::move(keep_alive);
  return p;
}

DType Payload::dtype() const {
  switch (kind_) {
    case Kind::kBytes: return DType::kBytes;
    case Kind::kFloats: return DType::kFloat32;
    case Kind::kBFloat16: return DType::kBFloat16;
    default: return DType::kNone;
  }
}

namespace {
void release_keep_alive(void* /*data*/, void* hint) { delete static_cast<std::shared_ptr<const void>*>(hint); }
void release_nothing(void* /*data*/, void* /*hint*/) {}
}  // namespace

zmq::message_t Payload::to_frame() && {
  if (kind_ == Kind::kBytes) return zmq::message_t(bytes_.data(), bytes_.size());
  void* data = kind_ == Kind::kBFloat16 ? static_cast<void*>(const_cast<std::uint16_t*>(bf16_.data()))
                                        : static_cast<void*>(const_cast<float*>(floats_.data()));
  const std::size_t num_bytes = kind_ == Kind::kBFloat16 ? bf16_.size_bytes() : floats_.size_bytes();
  if (num_bytes == 0) return zmq::message_t();
  if (keep_alive_) {
    auto* hint = new std::shared_ptr<const void>(std::move(keep_alive_));
    return zmq::message_t(data, num_bytes, &release_keep_alive, hint);
  }
  return zmq::message_t(data, num_bytes, &release_nothing, nullptr);
}

namespace {
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
      if (!socket.send(id, zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
        throw TransportError("send of " + std::string(to_string(header.type)) + " (key " +
                             std::to_string(header.key) + "): the peer's queue is full (it does not read)");
      }
    }
    for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
      if (!socket.send(parts[i], zmq::send_flags::sndmore)) {
        if (i == 0) throw_send_timeout(header);
      }
    }
    if (!socket.send(parts.back(), zmq::send_flags::none) && parts.size() == 1) throw_send_timeout(header);
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
  zmq::message_t head = encode_header(header);
  std::size_t bytes = head.size();
  std::optional<zmq::message_t> body;
  if (!payload.empty()) {
    body = std::move(payload).to_frame();
    bytes += body->size();
  }
  send_frames_raw(socket, routing_id, std::move(head), std::move(body), header);
  if (traffic != nullptr) traffic->add_sent(bytes);
}

std::optional<std::vector<zmq::message_t>> receive_frames_raw(zmq::socket_t& socket,
                                                              std::chrono::milliseconds timeout) {
  if (timeout.count() > 0) {
    zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, timeout) == 0) return std::nullopt;
  }
  std::vector<zmq::message_t> frames;
  try {
    while (true) {
      zmq::message_t frame;
      const auto flags = frames.empty() ? zmq::recv_flags::dontwait : zmq::recv_flags::none;
      if (!socket.recv(frame, flags)) return std::nullopt;
      const bool more = frame.more();
      frames.push_back(std::move(frame));
      if (!more) break;
    }
  } catch (const zmq::error_t& e) {
    throw TransportError(std::string("receive: ") + e.what());
  }
  return frames;
}

std::string frame_user_id(const zmq::message_t& frame) {
  const char* user = zmq_msg_gets(frame.handle(), "User-Id");
  return user != nullptr ? std::string(user) : std::string();
}

std::optional<ZmqEnvelope> receive_message(zmq::socket_t& socket, bool has_routing_id, std::chrono::milliseconds timeout,
                                        const DecodeLimits& limits, zmq::message_t* bad_routing_id,
                                        TrafficCounters* traffic) {
  std::optional<std::vector<zmq::message_t>> got = receive_frames_raw(socket, timeout);
  if (!got) return std::nullopt;
  std::vector<zmq::message_t>& frames = *got;
  ZmqEnvelope env;
  if (has_routing_id) {
    env.routing_id = std::move(frames.front());
    frames.erase(frames.begin());
    if (bad_routing_id != nullptr) *bad_routing_id = copy_frame(env.routing_id);
  }
  if (traffic != nullptr) {  // counted before decoding: malformed bytes arrived all the same
    std::size_t bytes = 0;
    for (const zmq::message_t& frame : frames) bytes += frame.size();
    traffic->add_received(bytes);
  }
  if (!frames.empty()) env.user_id = frame_user_id(frames.front());  // the ZAP user id rides on every frame
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
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "connection ";
  const auto* bytes = static_cast<const unsigned char*>(routing_id.data());
  for (std::size_t i = 0; i < routing_id.size() && i < 16; ++i) {
    out += kHex[bytes[i] >> 4];
    out += kHex[bytes[i] & 15];
  }
  return out;
}


// ---- the transport interface's shared halves ----

std::string PeerId::name() const {
  return connection_name(zmq::message_t(bytes_.data(), bytes_.size()));
}

void Endpoint::send_impl(const PeerId* to, Header header, Payload payload) {
  header.dtype = payload.dtype();
  header.num_elems = payload.num_elems();
  zmq::message_t head = encode_header(header);
  std::size_t bytes = head.size();
  std::optional<zmq::message_t> body;
  if (!payload.empty()) {
    body = std::move(payload).to_frame();
    bytes += body->size();
  }
  send_frames(to, std::move(head), std::move(body), header);
  if (options_.traffic != nullptr) options_.traffic->add_sent(bytes);
}

std::optional<Envelope> Endpoint::receive_impl(std::chrono::milliseconds timeout, PeerId* bad_from) {
  std::optional<Frames> got = receive_frames(timeout);
  if (!got) return std::nullopt;
  if (bad_from != nullptr) *bad_from = got->from;
  if (options_.traffic != nullptr) {  // counted before decoding: malformed bytes arrived all the same
    std::size_t bytes = 0;
    for (const zmq::message_t& frame : got->frames) bytes += frame.size();
    options_.traffic->add_received(bytes);
  }
  if (!got->protocol_error.empty()) throw ProtocolError(got->protocol_error);
  Envelope env;
  env.from = std::move(got->from);
  env.user_id = std::move(got->user_id);
  env.message = decode_message(got->frames, options_.limits);  // the one place every transport's input is checked
  return env;
}

void Listener::send_error(const PeerId& to, const Header& request, Role my_role, std::int32_t my_rank, Status status,
                          const std::string& text) {
  Header reply;
  reply.type = MsgType::kError;
  reply.role = my_role;
  reply.sender = my_rank;
  reply.status = status;
  reply.request_id = request.request_id;
  reply.key = request.key;
  reply.step = request.step;
  send(to, reply, Payload::bytes(text.substr(0, kMaxBodyBytes)));
}

std::vector<bool> wait_any(std::span<Endpoint* const> endpoints, std::chrono::milliseconds timeout) {
  if (endpoints.empty()) throw TransportError("wait_any: no endpoints to wait on");
  Transport& transport = endpoints.front()->transport();
  for (const Endpoint* e : endpoints) {
    if (&e->transport() != &transport) throw TransportError("wait_any: endpoints of different transports");
  }
  return transport.wait_any(endpoints, timeout);
}

SendFloats Transport::allocate_send_floats(std::size_t count) {
  // calloc: large blocks come as fresh zero pages, touched only when written.
  auto* raw = static_cast<float*>(std::calloc(count == 0 ? 1 : count, sizeof(float)));
  if (raw == nullptr) throw Error("cannot allocate " + std::to_string(count) + " floats");
  auto values = std::shared_ptr<float>(raw, [](float* p) { std::free(p); });
  SendFloats out;
  out.values = std::span<float>(values.get(), count);
  out.owner = std::move(values);
  return out;
}

}  // namespace pstrain
