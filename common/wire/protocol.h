// The wire protocol. Every message is one or two frames (common/wire/buffer.h;
// over ZeroMQ, one ZeroMQ frame each):
//   frame 0: Header, fixed size, cereal-encoded (kHeaderBytes bytes);
//   frame 1: optional payload: raw float32 (or, for pushes and pull replies,
//            bfloat16: ps.wire_dtype) tensor bytes for data messages
//            (never through cereal, sent zero-copy) or a cereal-encoded body /
//            UTF-8 text for control and error messages.
// A ROUTER socket sees the peer's routing id as an extra leading frame.
// Everything read off the wire is untrusted: decode_message() checks frame
// count, magic, version, type, dtype, sizes and caps before anything is
// allocated from it, and throws ProtocolError saying what was wrong.
// See docs/protocol.md for the table of message types.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/math/param_layout.h"
#include "common/wire/buffer.h"

namespace pstrain {

inline constexpr std::uint32_t kProtocolMagic = 0x50535452;  // "PSTR"
inline constexpr std::uint16_t kProtocolVersion = 11;  // 4: bfloat16; 5: server restart, kRejoined; 6: kRetryLater, kRefused; 7: kChallenge and the registration's proof; 8: kPushChunks, kPullChunks, kMembershipChange, kDone's retired aux; 9: kWorkerJoining, kRegisterJoin, kDropped's retired aux; 10: the register reply's aux to a --rejoin (the highest checkpoint barrier released); 11: RegisterReply::retired_by_change
inline constexpr std::size_t kMaxBodyBytes = std::size_t{1} << 20;  // control bodies and error text

enum class MsgType : std::uint8_t {
  // node <-> scheduler
  kRegister = 1,      // body RegisterRequest
  kRegisterReply,     // body RegisterReply
  kBarrier,           // key = barrier sequence number, body = barrier name
  kBarrierReply,      // key = barrier sequence number
  kHeartbeat,         // no payload
  kDone,              // a worker finished; no payload
  kShutdown,          // scheduler -> node: exit cleanly
  kAbort,             // either way: the job failed; body = reason text
  // worker <-> server, one chunk (key) per message
  kInit,              // key, payload = chunk's initial weights
  kInitReply,
  kPush,              // key, step, lr, aux = kPushGradient, payload = chunk's gradient (float32 or bfloat16); or
                      // aux = kPushSkip, no payload: the worker contributes nothing to this step
  kPushReply,         // key, step, version, aux = staleness (async)
  kPull,              // key, step = the worker's step (sync: the version it needs), aux = the reply's dtype
                      // (DType code: kNone or kFloat32 = float32, kBFloat16 = bfloat16)
  kPullReply,         // key, version, aux = us parked at the server, payload = chunk's weights (as asked)
  // node <-> scheduler: the rendezvous store (allreduce: Gloo's addresses, NCCL's id)
  kStoreSet,          // body StoreEntry (key, value); replied kStoreReply
  kStoreGet,          // body StoreEntry (key), aux = wait limit in ms; replied kStoreReply once the key is set
  kStoreReply,        // body StoreEntry (key; get: its value)
  kError,             // reply to any request: status, body = message text
  kDropped,           // scheduler -> nodes: worker `key` left the job (on_worker_failure "continue"); body = why
  // scheduler -> workers (on_server_failure "restart"): server `key` failed and is being restarted (body = why):
  // requests to it wait instead of timing out; then it is back at the endpoint in the body: reconnect, resend.
  kServerRestarting,
  kServerBack,
  kRejoined,          // scheduler -> nodes: a new process took back worker rank `key` (on_worker_failure
                      // "restart"); step = how many times it has rejoined; body = its new session token
  // Registration's challenge (security.mode "off", common/wire/job_secret.h): node -> scheduler, no
  // payload: asks for a nonce; scheduler -> node (request_id echoed), payload = the nonce (empty when the
  // scheduler takes registrations without a secret). The node's kRegister then carries the nonce and
  // its answer (RegisterRequest::challenge, ::proof).
  kChallenge,
  // worker -> server, several chunks per message: the run of consecutive chunk ids [key, key + version)
  // (version = the chunk count, 1..kMaxChunksPerMessage), all held by the receiving server. Each chunk is
  // served as the single-chunk request it stands for (same step, lr, aux, dtype; key + i, request_id + i)
  // and answered by its own kPushReply / kPullReply / kError with that request id and key, so a pull
  // reply still carries one chunk's weights zero-copy, sent as soon as that chunk can be answered.
  kPushChunks,        // key, version = count, step, lr, aux = kPushGradient: payload = the chunks' gradients
                      // back to back (float32, as they lie in the flat buffer: sent zero-copy), num_elems their sum;
                      // aux = kPushSkip: no payload
  kPullChunks,        // key, version = count, step, aux = the replies' dtype (as kPull); no payload
  // Elastic membership (docs/architecture.md, "Elastic membership"): scheduler -> workers: change `key`
  // (1, 2, ...) of the job's workers is pending, to the members in the body ("0,1"). Each worker answers
  // at its next step boundary through the store (kMembershipPrefix) and waits for the step it takes
  // effect at.
  kMembershipChange,
  // Elastic membership, a grow: scheduler -> servers: worker `key` joins its vacant slot from step `step`
  // (the job's global step numbering) for change `aux`; body = its session token. Each server admits it
  // (ConsistencyPolicy::join_worker on every chunk, its connection bound to the token) and acknowledges
  // through the store (kJoinAckPrefix) before the scheduler publishes the change's boundary.
  kWorkerJoining,
  kLast = kWorkerJoining,
};
std::string_view to_string(MsgType type);

// kPush's aux: a gradient (the payload) or a skip (no payload): the worker
// saw a non-finite loss or gradient (workload.on_nonfinite = "skip") and
// contributes nothing to this step of this chunk; the servers count it as
// its arrival (sync) or its clock (ssp) without an update from it.
inline constexpr std::int64_t kPushGradient = 0;
inline constexpr std::int64_t kPushSkip = 1;

// The most chunks one kPushChunks / kPullChunks may name.
inline constexpr std::int64_t kMaxChunksPerMessage = 64;

// kRegister's aux: a first registration, or a process replacing a dropped node of the same rank (--rejoin;
// the scheduler's reply then carries in its key the barrier sequence number the node's next barrier takes, and
// in its aux the step of the highest checkpoint barrier the others had passed, 0 for none, the largest int64 once the final barrier was: ps_rejoin.h).
inline constexpr std::int64_t kRegisterFirst = 0;
inline constexpr std::int64_t kRegisterRejoin = 1;
// A worker started with --join: it takes a vacant slot of a running elastic
// job (cluster.max_workers) and enters the job at the boundary of the
// membership change its registration starts (kJoinStartPrefix).
inline constexpr std::int64_t kRegisterJoin = 2;
// kDone's aux: a worker finished the job (kDoneFinished), or left it at a
// membership change that did not keep it (kDoneRetired: a shrink; neither a
// failure nor a drop; the scheduler answers with kShutdown at once).
inline constexpr std::int64_t kDoneFinished = 0;
inline constexpr std::int64_t kDoneRetired = 1;
// kDropped's aux: a failure's drop (kDroppedFailed), or a retirement (kDroppedRetired): the worker left
// at a membership change, and its slot is vacant again (no later update is partial for want of it).
inline constexpr std::int64_t kDroppedFailed = 0;
inline constexpr std::int64_t kDroppedRetired = 1;
// kPull's step for a rejoined worker's probe: answered at once with the
// current weights, the reply's step = the step the server expects this
// worker to push next for the chunk (its clock there; server/consistency.h).
inline constexpr std::int64_t kPullRejoinProbe = -1;

enum class Role : std::uint8_t { kScheduler = 0, kServer = 1, kWorker = 2 };
std::string_view to_string(Role role);

// kBFloat16 (common/base/bfloat16.h) only on kPush and kPullReply payloads.
enum class DType : std::uint8_t { kNone = 0, kFloat32 = 1, kBytes = 2, kBFloat16 = 3 };
std::string_view to_string(DType dtype);
// Bytes per element of a tensor dtype (float32 4, bfloat16 2; 0 otherwise).
std::size_t dtype_bytes(DType dtype);


enum class Status : std::uint8_t {
  kOk = 0,
  kBadRequest = 1,   // malformed or inconsistent request
  kRejected = 2,     // well-formed but refused: duplicate or stale push, NaN gradient
  kNotOwner = 3,     // key not held by this server
  kAborted = 4,      // the job is shutting down
  // The scheduler's refusals of a well-formed request (SchedulerRefusal on the
  // node's side, common/node/scheduler_client.h):
  kRetryLater = 5,   // not yet: the same request may be granted later (a rejoin while the rank still counts as alive)
  kRefused = 6,      // never: the same request will not be (a rank out of range, another job, a wrong key)
};
std::string_view to_string(Status status);

struct Header {
  std::uint32_t magic = kProtocolMagic;
  std::uint16_t proto_version = kProtocolVersion;
  MsgType type = MsgType::kHeartbeat;
  Role role = Role::kWorker;          // sender's role
  DType dtype = DType::kNone;         // of the payload frame
  Status status = Status::kOk;
  std::int32_t sender = -1;           // sender's rank within its role (-1 before assignment)
  std::uint64_t request_id = 0;       // echoed in the reply
  std::int64_t key = -1;              // chunk id, or barrier sequence number
  std::int64_t step = 0;              // push, pull: the worker's step
  std::int64_t version = 0;           // replies: chunk version
  std::int64_t num_elems = 0;         // tensor payload (float32, bfloat16): element count
  std::int64_t aux = 0;               // push: kPushGradient/kPushSkip; push reply: staleness; pull reply: us parked
  double lr = 0.0;                    // push: learning rate for this update

  template <class Archive>
  void serialize(Archive& ar) {
    ar(magic, proto_version, type, role, dtype, status, sender, request_id, key, step, version, num_elems, aux, lr);
  }
};

// The dtype a kPull asks its reply in (its aux: kNone or kFloat32 = float32,
// kBFloat16); throws ProtocolError for any other code.
DType pull_reply_dtype(const Header& pull);

// The single-chunk request (kPush, kPull) that chunk `index` of a run
// (kPushChunks, kPullChunks) stands for: key + index, request_id + index,
// version 0, num_elems `num_elems` (that chunk's payload elements; 0 for a
// pull or a skip), dtype kNone when it has no payload.
Header chunk_request(const Header& run, std::int64_t index, std::int64_t num_elems);

// Encoded size of every header (all fields are fixed size).
std::size_t header_wire_bytes();

// Body of kRegister.
struct RegisterRequest {
  Role role = Role::kWorker;
  std::int32_t requested_rank = -1;   // -1: scheduler assigns
  std::string endpoint;               // servers: where workers connect
  std::string host;                   // for messages
  std::int64_t pid = 0;
  std::string job_fingerprint;        // mode, sizes: must match across nodes
  ParamLayout layout;                 // workers: the model's layout (all must agree)
  // Security mode "off" (common/wire/job_secret.h): the nonce of the scheduler's kChallenge, and
  // answer_challenge(job secret, nonce, this request encoded with an empty proof). Both empty
  // without a job secret (curve's keys admit instead).
  std::string challenge;
  std::string proof;

  template <class Archive>
  void serialize(Archive& ar) { ar(role, requested_rank, endpoint, host, pid, job_fingerprint, layout, challenge, proof); }
};

// RegisterReply::retired_by_change of a rank a resize request retired while
// it was down, when the live workers were no more than asked for.
inline constexpr std::int64_t kRetiredByRequest = -1;

// Body of kRegisterReply.
struct RegisterReply {
  std::int32_t rank = -1;
  std::int32_t num_servers = 0;
  std::int32_t num_workers = 0;
  std::vector<std::string> server_endpoints;  // by server rank
  ParamLayout layout;
  // This node's session token (32 hex digits, random per job): its
  // heartbeat connection names itself "h" + token, so the scheduler takes a
  // heartbeat only from the node it names.
  std::string token;
  // Servers only: each worker's token, by rank. A worker's connection to a
  // server names itself "w" + its token; the server takes a request for
  // worker w only from the connection named by w's token.
  std::vector<std::string> worker_tokens;
  // A --rejoin of a worker rank that a membership change left out while the
  // rank was down (its process dead or stopped): that change's number, and the
  // new process leaves at once, retired, without training (0: taken back;
  // kRetiredByRequest: a request for fewer workers, with no change needed).
  std::int64_t retired_by_change = 0;

  template <class Archive>
  void serialize(Archive& ar) {
    ar(rank, num_servers, num_workers, server_endpoints, layout, token, worker_tokens, retired_by_change);
  }
};

// Body of kStoreSet, kStoreGet and kStoreReply: one entry of the
// scheduler's key-value store (keys are text, values any bytes).
inline constexpr std::size_t kMaxStoreKeyBytes = 256;
inline constexpr std::size_t kMaxStoreValueBytes = std::size_t{64} << 10;
inline constexpr std::size_t kMaxStoreEntries = 4096;  // per job
// Store keys the scheduler answers itself: the first get of
// kEpochMembersPrefix + "<epoch>" fixes that epoch's workers as the live ones
// ("0,2,3"; worker/train/epoch_members.h).
inline constexpr std::string_view kEpochMembersPrefix = "pstrain/epoch-members/";
// A get of kLiveWorkersKey is answered with the workers not dropped at that
// moment ("0,2,3"), never stored: the PS checkpoint's manifest writer is the
// lowest of them (worker/train/worker_checkpoint.h). A set of it is refused.
inline constexpr std::string_view kLiveWorkersKey = "pstrain/live-workers";
// Elastic membership's store keys (kMembershipChange): worker R sets
// kMembershipPrefix + "<change>/<R>" to where it is, "<epoch> <step>" (the
// next step it runs: that step of that epoch, counted within it) or "end"
// (no step left); the scheduler alone sets kMembershipPrefix + "<change>",
// once every live worker has answered, to the boundary "<epoch> <step>
// <members>" (from that step of that epoch the members share the rest of
// it) or "none" (no step is left to change); workers get it.
inline constexpr std::string_view kMembershipPrefix = "pstrain/membership/";
// A grow (kRegisterJoin): server S acknowledges kWorkerJoining of joiner R in
// change C by setting kJoinAckPrefix + "<C>/<S>/<R>" ("ok", or why it refused); the
// scheduler alone sets kJoinStartPrefix + "<R>/<token>" for the joiner of
// slot R once every server has: "<change> <epoch> <from_step> <global_step>
// <barrier_seq> <0|1>" (where it starts: that step of that epoch, the job's
// global step, the number of its next barrier, whether it takes the barrier
// of a checkpoint at its first step) or "none" (the join was abandoned: no
// step was left). Both lie under kMembershipPrefix: no worker sets them.
inline constexpr std::string_view kJoinAckPrefix = "pstrain/membership/join-ack/";
inline constexpr std::string_view kJoinStartPrefix = "pstrain/membership/join-start/";
struct StoreEntry {
  std::string key;
  std::string value;

  template <class Archive>
  void serialize(Archive& ar) { ar(key, value); }
};
// Throws ProtocolError naming `op` unless the key has 1..kMaxStoreKeyBytes
// bytes and the value at most kMaxStoreValueBytes.
void validate_store_entry(const StoreEntry& entry, std::string_view op);

// A decoded, validated message. The payload frame is kept as received
// (no copy: the transport's own buffer, a ZeroMQ message or a shared-memory
// slot, held in the Buffer); float_payload() views it as floats (copying
// into `scratch` only when the transport handed out an unaligned buffer or
// the payload is bfloat16, which is widened there).
struct Message {
  Header header;
  Buffer payload;
  bool has_payload = false;

  std::span<const float> float_payload(std::vector<float>& scratch) const;
  // Writes the tensor payload as float32 straight into `dest` (one copy, or
  // one widening pass for bfloat16): receive into place. dest.size() must be
  // header.num_elems (ProtocolError otherwise). `streaming`: float32 is
  // copied with stores that bypass the caches (common/base/stream_copy.h), for a
  // destination too big to stay in them anyway (no read of its old lines).
  void copy_floats_to(std::span<float> dest, bool streaming = false) const;
  std::string text_payload() const;
};

struct DecodeLimits {
  std::int64_t max_payload_bytes = std::int64_t{1} << 30;
};

// Validates and decodes frames (without any routing-id frame).
Message decode_message(std::vector<Buffer>& frames, const DecodeLimits& limits);

// Frame 0 for a header (its bytes inside the Buffer: no heap block).
Buffer encode_header(const Header& header);

}  // namespace pstrain
