#include "common/wire/protocol.h"
#include "common/base/stream_copy.h"

#include <cereal/types/common.hpp>
#include <cstring>
#include <limits>

#include "common/base/bfloat16.h"
#include "common/base/errors.h"
#include "common/wire/wire_archive.h"

namespace pstrain {

std::string_view to_string(MsgType type) {
  switch (type) {
    case MsgType::kRegister: return "register";
    case MsgType::kRegisterReply: return "register-reply";
    case MsgType::kBarrier: return "barrier";
    case MsgType::kBarrierReply: return "barrier-reply";
    case MsgType::kHeartbeat: return "heartbeat";
    case MsgType::kDone: return "done";
    case MsgType::kShutdown: return "shutdown";
    case MsgType::kAbort: return "abort";
    case MsgType::kInit: return "init";
    case MsgType::kInitReply: return "init-reply";
    case MsgType::kPush: return "push";
    case MsgType::kPushReply: return "push-reply";
    case MsgType::kPull: return "pull";
    case MsgType::kPullReply: return "pull-reply";
    case MsgType::kStoreSet: return "store-set";
    case MsgType::kStoreGet: return "store-get";
    case MsgType::kStoreReply: return "store-reply";
    case MsgType::kError: return "error";
    case MsgType::kDropped: return "dropped";
    case MsgType::kServerRestarting: return "server restarting";
    case MsgType::kServerBack: return "server back";
    case MsgType::kRejoined: return "rejoined";
    case MsgType::kChallenge: return "challenge";
    case MsgType::kPushChunks: return "push-chunks";
    case MsgType::kPullChunks: return "pull-chunks";
    case MsgType::kMembershipChange: return "membership change";
    case MsgType::kWorkerJoining: return "worker joining";
  }
  return "unknown";
}

std::string_view to_string(Role role) {
  switch (role) {
    case Role::kScheduler: return "scheduler";
    case Role::kServer: return "server";
    case Role::kWorker: return "worker";
  }
  return "unknown";
}

std::string_view to_string(Status status) {
  switch (status) {
    case Status::kOk: return "ok";
    case Status::kBadRequest: return "bad request";
    case Status::kRejected: return "rejected";
    case Status::kNotOwner: return "not owner";
    case Status::kAborted: return "aborted";
    case Status::kRetryLater: return "retry later";
    case Status::kRefused: return "refused";
  }
  return "unknown";
}

std::string_view to_string(DType dtype) {
  switch (dtype) {
    case DType::kNone: return "none";
    case DType::kFloat32: return "float32";
    case DType::kBytes: return "bytes";
    case DType::kBFloat16: return "bfloat16";
  }
  return "unknown";
}

std::size_t dtype_bytes(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 4;
    case DType::kBFloat16: return 2;
    default: return 0;
  }
}

DType pull_reply_dtype(const Header& pull) {
  if (pull.aux == static_cast<std::int64_t>(DType::kNone) || pull.aux == static_cast<std::int64_t>(DType::kFloat32)) {
    return DType::kFloat32;
  }
  if (pull.aux == static_cast<std::int64_t>(DType::kBFloat16)) return DType::kBFloat16;
  throw ProtocolError("pull of chunk " + std::to_string(pull.key) + " from worker " + std::to_string(pull.sender) +
                      ": aux " + std::to_string(pull.aux) + " asks for no known reply dtype (0 or 1: float32, 3: bfloat16)");
}

std::size_t header_wire_bytes() {
  static const std::size_t num_bytes = wire_encode(Header{}).size();
  return num_bytes;
}

void validate_store_entry(const StoreEntry& entry, std::string_view op) {
  if (entry.key.empty() || entry.key.size() > kMaxStoreKeyBytes) {
    throw ProtocolError(std::string(op) + ": key of " + std::to_string(entry.key.size()) + " bytes, expected 1 to " +
                        std::to_string(kMaxStoreKeyBytes));
  }
  if (entry.value.size() > kMaxStoreValueBytes) {
    throw ProtocolError(std::string(op) + " of key '" + entry.key + "': value of " + std::to_string(entry.value.size()) +
                        " bytes exceeds the " + std::to_string(kMaxStoreValueBytes) + "-byte limit");
  }
}

Buffer encode_header(const Header& header) {
  const std::string bytes = wire_encode(header);
  return Buffer::copy(bytes);
}

namespace {

// Which payload each type carries: float data, bytes (body/text), optional bytes, or none.
enum class PayloadRule { kNone, kFloats, kBytes, kOptionalBytes };

PayloadRule payload_rule(MsgType type) {
  switch (type) {
    case MsgType::kInit:
    case MsgType::kPush:
    case MsgType::kPushChunks:
    case MsgType::kPullReply: return PayloadRule::kFloats;
    case MsgType::kRegister:
    case MsgType::kRegisterReply:
    case MsgType::kAbort:
    case MsgType::kStoreSet:
    case MsgType::kStoreGet:
    case MsgType::kStoreReply:
    case MsgType::kError:
    case MsgType::kDropped:
    case MsgType::kServerRestarting:
    case MsgType::kServerBack: return PayloadRule::kBytes;
    case MsgType::kRejoined:
    case MsgType::kMembershipChange:
    case MsgType::kWorkerJoining: return PayloadRule::kBytes;
    case MsgType::kBarrier:
    case MsgType::kChallenge: return PayloadRule::kOptionalBytes;
    default: return PayloadRule::kNone;
  }
}

std::string describe(const Header& h) {
  return std::string(to_string(h.type)) + " from " + std::string(to_string(h.role)) + " " +
         std::to_string(h.sender);
}

void validate_payload(const Header& h, bool has_payload, std::size_t payload_bytes, const DecodeLimits& limits) {
  PayloadRule rule = payload_rule(h.type);
  const bool push = h.type == MsgType::kPush || h.type == MsgType::kPushChunks;
  if (push) {  // aux: kPushGradient (payload) or kPushSkip (none)
    if (h.aux == kPushSkip) {
      rule = PayloadRule::kNone;
    } else if (h.aux != kPushGradient) {
      throw ProtocolError(describe(h) + " (key " + std::to_string(h.key) + "): aux " + std::to_string(h.aux) +
                          " is neither " + std::to_string(kPushGradient) + " (a gradient) nor " +
                          std::to_string(kPushSkip) + " (a skip)");
    }
  }
  if (rule == PayloadRule::kNone && has_payload) {
    throw ProtocolError(describe(h) + ": carries no payload, got a " + std::to_string(payload_bytes) +
                        "-byte payload frame");
  }
  if ((rule == PayloadRule::kFloats || rule == PayloadRule::kBytes) && !has_payload) {
    throw ProtocolError(describe(h) + ": payload frame missing");
  }
  if (!has_payload) {
    if (h.dtype != DType::kNone || h.num_elems != 0) {
      throw ProtocolError(describe(h) + ": no payload but dtype/num_elems set");
    }
    return;
  }
  if (rule == PayloadRule::kFloats) {
    // bfloat16 only where ps.wire_dtype applies: gradients pushed and weights
    // pulled (initial weights are always float32: exact).
    // A run's gradients are float32 only (bfloat16 pushes go one chunk a message).
    const bool bf16_allowed = h.type == MsgType::kPush || h.type == MsgType::kPullReply;
    if (h.dtype != DType::kFloat32 && !(bf16_allowed && h.dtype == DType::kBFloat16)) {
      throw ProtocolError(describe(h) + ": expected dtype float32" + std::string(bf16_allowed ? " or bfloat16" : "") +
                          ", got code " + std::to_string(static_cast<int>(h.dtype)));
    }
    const auto elem = static_cast<std::int64_t>(dtype_bytes(h.dtype));
    if (h.num_elems < 0 || h.num_elems > limits.max_payload_bytes / elem) {
      throw ProtocolError(describe(h) + ": num_elems " + std::to_string(h.num_elems) + " outside [0, " +
                          std::to_string(limits.max_payload_bytes / elem) + "]");
    }
    if (payload_bytes != static_cast<std::size_t>(h.num_elems * elem)) {
      throw ProtocolError(describe(h) + " (key " + std::to_string(h.key) + "): expected " +
                          std::to_string(h.num_elems * elem) + " payload bytes for " + std::to_string(h.num_elems) +
                          " " + std::string(to_string(h.dtype)) + " elements, got " + std::to_string(payload_bytes));
    }
  } else {
    if (h.dtype != DType::kBytes) {
      throw ProtocolError(describe(h) + ": expected dtype bytes, got code " +
                          std::to_string(static_cast<int>(h.dtype)));
    }
    if (payload_bytes > kMaxBodyBytes) {
      throw ProtocolError(describe(h) + ": body of " + std::to_string(payload_bytes) + " bytes exceeds the " +
                          std::to_string(kMaxBodyBytes) + "-byte limit");
    }
  }
}

// kPushChunks, kPullChunks: the run [key, key + version) of 1..kMaxChunksPerMessage chunk ids.
void validate_run(const Header& h) {
  if (h.type != MsgType::kPushChunks && h.type != MsgType::kPullChunks) return;
  if (h.version < 1 || h.version > kMaxChunksPerMessage) {
    throw ProtocolError(describe(h) + " (key " + std::to_string(h.key) + "): chunk count (version) " +
                        std::to_string(h.version) + " outside [1, " + std::to_string(kMaxChunksPerMessage) + "]");
  }
  if (h.key < 0 || h.key > std::numeric_limits<std::int64_t>::max() - h.version) {
    throw ProtocolError(describe(h) + ": first chunk " + std::to_string(h.key) + " is not a chunk id");
  }
  if (h.request_id > std::numeric_limits<std::uint64_t>::max() - static_cast<std::uint64_t>(h.version)) {
    throw ProtocolError(describe(h) + ": request id " + std::to_string(h.request_id) + " leaves no room for " +
                        std::to_string(h.version) + " chunks' ids");
  }
}

}  // namespace

Header chunk_request(const Header& run, std::int64_t index, std::int64_t num_elems) {
  Header h = run;
  h.type = run.type == MsgType::kPushChunks ? MsgType::kPush : MsgType::kPull;
  h.key = run.key + index;
  h.request_id = run.request_id + static_cast<std::uint64_t>(index);
  h.version = 0;
  h.num_elems = num_elems;
  if (num_elems == 0 && h.type == MsgType::kPull) h.dtype = DType::kNone;
  if (h.type == MsgType::kPush && h.aux == kPushSkip) h.dtype = DType::kNone;
  return h;
}

Message decode_message(std::vector<Buffer>& frames, const DecodeLimits& limits) {
  if (frames.empty() || frames.size() > 2) {
    throw ProtocolError("message has " + std::to_string(frames.size()) + " frames, expected 1 or 2");
  }
  const Buffer& head = frames[0];
  if (head.size() != header_wire_bytes()) {
    throw ProtocolError("header frame is " + std::to_string(head.size()) + " bytes, expected " +
                        std::to_string(header_wire_bytes()));
  }
  Message msg;
  msg.header = wire_decode<Header>(
      std::span<const std::byte>(static_cast<const std::byte*>(head.data()), head.size()), "header");
  const Header& h = msg.header;
  if (h.magic != kProtocolMagic) {
    throw ProtocolError("bad magic 0x" + [&] {
      char buf[16];
      std::snprintf(buf, sizeof(buf), "%08x", h.magic);
      return std::string(buf);
    }() + ": not a pstrain message");
  }
  if (h.proto_version != kProtocolVersion) {
    throw ProtocolError("protocol version " + std::to_string(h.proto_version) + ", this build speaks " +
                        std::to_string(kProtocolVersion));
  }
  const auto type_code = static_cast<int>(h.type);
  if (type_code < static_cast<int>(MsgType::kRegister) || type_code > static_cast<int>(MsgType::kLast)) {
    throw ProtocolError("unknown message type " + std::to_string(type_code));
  }
  if (static_cast<int>(h.role) > static_cast<int>(Role::kWorker)) {
    throw ProtocolError("unknown role " + std::to_string(static_cast<int>(h.role)));
  }
  if (static_cast<int>(h.dtype) > static_cast<int>(DType::kBFloat16)) {
    throw ProtocolError(describe(h) + ": unknown dtype code " + std::to_string(static_cast<int>(h.dtype)));
  }
  if (static_cast<int>(h.status) > static_cast<int>(Status::kRefused)) {
    throw ProtocolError(describe(h) + ": unknown status code " + std::to_string(static_cast<int>(h.status)));
  }
  if (h.type == MsgType::kPull || h.type == MsgType::kPullChunks) (void)pull_reply_dtype(h);  // an unknown reply dtype is malformed
  validate_run(h);
  msg.has_payload = frames.size() == 2;
  validate_payload(h, msg.has_payload, msg.has_payload ? frames[1].size() : 0, limits);
  if (msg.has_payload) msg.payload = std::move(frames[1]);
  return msg;
}

std::span<const float> Message::float_payload(std::vector<float>& scratch) const {
  const auto n = static_cast<std::size_t>(header.num_elems);
  const void* data = payload.data();
  if (header.dtype == DType::kBFloat16) {
    scratch.resize(n);
    copy_floats_to(scratch);
    return {scratch.data(), n};
  }
  if (reinterpret_cast<std::uintptr_t>(data) % alignof(float) == 0) {
    return {static_cast<const float*>(data), n};
  }
  scratch.resize(n);
  std::memcpy(scratch.data(), data, n * sizeof(float));
  return {scratch.data(), n};
}

void Message::copy_floats_to(std::span<float> dest, bool streaming) const {
  const auto n = static_cast<std::size_t>(header.num_elems);
  if (dest.size() != n) {
    throw ProtocolError(std::string(to_string(header.type)) + " of chunk " + std::to_string(header.key) + ": " +
                        std::to_string(n) + " elements for a destination of " + std::to_string(dest.size()));
  }
  if (n == 0) return;
  if (header.dtype == DType::kBFloat16) {
    const void* data = payload.data();
    if (reinterpret_cast<std::uintptr_t>(data) % alignof(std::uint16_t) == 0) {
      from_bfloat16(std::span<const std::uint16_t>(static_cast<const std::uint16_t*>(data), n), dest);
    } else {
      for (std::size_t i = 0; i < n; ++i) {
        std::uint16_t v;
        std::memcpy(&v, static_cast<const char*>(data) + 2 * i, 2);
        dest[i] = from_bfloat16(v);
      }
    }
    return;
  }
  if (header.dtype != DType::kFloat32) {
    throw ProtocolError(std::string(to_string(header.type)) + " of chunk " + std::to_string(header.key) +
                        ": no tensor payload (dtype " + std::string(to_string(header.dtype)) + ")");
  }
  if (streaming) {
    stream_copy(dest.data(), payload.data(), n * sizeof(float));
  } else {
    std::memcpy(dest.data(), payload.data(), n * sizeof(float));
  }
}

std::string Message::text_payload() const {
  return has_payload ? std::string(static_cast<const char*>(payload.data()), payload.size()) : std::string();
}

}  // namespace pstrain
