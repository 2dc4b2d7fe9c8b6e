#include "common/transport/transport.h"

#include <cstdlib>

#include "common/base/errors.h"

namespace pstrain {

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

Buffer Payload::to_buffer() && {
  if (kind_ == Kind::kBytes) return Buffer::copy(bytes_);
  const void* data = kind_ == Kind::kBFloat16 ? static_cast<const void*>(bf16_.data())
                                              : static_cast<const void*>(floats_.data());
  const std::size_t num_bytes = kind_ == Kind::kBFloat16 ? bf16_.size_bytes() : floats_.size_bytes();
  if (num_bytes == 0) return Buffer();
  if (!keep_alive_) return Buffer::borrow(data, num_bytes);
  return Buffer::hold(std::move(keep_alive_), [data, num_bytes](const std::shared_ptr<const void>&) {
    return std::span<const std::byte>(static_cast<const std::byte*>(data), num_bytes);
  });
}

// ---- the transport interface's shared halves ----

std::string connection_name(std::string_view routing_id) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "connection ";
  for (std::size_t i = 0; i < routing_id.size() && i < 16; ++i) {
    const auto byte = static_cast<unsigned char>(routing_id[i]);
    out += kHex[byte >> 4];
    out += kHex[byte & 15];
  }
  return out;
}

std::string PeerId::name() const { return connection_name(bytes_); }

std::int64_t unsent_bound(const MemoryLimits& limits) {
  return limits.budget_bytes > 0 ? 2 * (limits.budget_bytes + limits.strangers_bytes) : 0;
}

void Endpoint::send_impl(const PeerId* to, Header header, Payload payload) {
  header.dtype = payload.dtype();
  header.num_elems = payload.num_elems();
  Buffer head = encode_header(header);
  std::size_t bytes = head.size();
  std::optional<Buffer> body;
  if (!payload.empty()) {
    body = std::move(payload).to_buffer();
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
    for (const Buffer& frame : got->frames) bytes += frame.size();
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

std::uint64_t Transport::shared_pages_of(Buffer& /*frame*/) const { return 0; }

bool Transport::map_shared_pages(Buffer& /*frame*/, std::size_t /*offset*/, void* /*dest*/, std::size_t /*bytes*/) {
  return false;
}

}  // namespace pstrain
