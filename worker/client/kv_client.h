// The worker's client of the parameter servers: push gradients, pull
// weights, initialize the servers, chunk by chunk, with every request to
// every server in flight at once.
//
// Requests are non-blocking: push()/pull()/init() send and return a Ticket;
// wait(ticket) blocks until all of that ticket's replies have arrived (pull
// replies are copied into the caller's buffer as they arrive, or mapped there:
// map_pulls_into). The buffers
// handed to push()/init() are sent zero-copy: keep them alive and unchanged,
// and the buffer given to pull() untouched, until wait() returns for that
// ticket. An error reply from a server makes wait() throw ServerError
// (common/base/errors.h) with the server's status, rank and text (the first
// error of the ticket), except status kAborted (the server is shutting the
// job down), which throws AbortedError; an abort or a shutdown from the scheduler (when a
// SchedulerClient is attached) makes it throw AbortedError; no reply within timeout_ms throws
// TimeoutError naming the request.
// A server restart (cluster.on_server_failure = "restart"): while the
// scheduler says a server is restarting, waits do not time out; when it says
// the server is back at a new endpoint, the client reconnects to it and
// resends every request to it still unanswered, in the order first sent (the
// server takes a push of a (worker, step, chunk) once: a resend of one it
// already took is acknowledged, not applied again). Not thread-safe: one
// thread owns it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/config/config.h"
#include "common/wire/protocol.h"
#include "common/node/scheduler_client.h"
#include "common/math/shard_map.h"
#include "common/transport/transport.h"
#include "common/observe/traffic_counters.h"
#include "common/observe/trace.h"
#include "worker/client/pull_pages.h"

namespace pstrain {

struct KVClientOptions {
  int worker_rank = 0;
  // The worker's session token (RegisterReply::token): each connection to a
  // server names itself "w" + token, which binds its requests to this rank.
  std::string token;
  std::chrono::milliseconds timeout{120000};
  std::int64_t max_message_bytes = std::int64_t{1} << 30;
  TrafficCounters* traffic = nullptr;  // the node's byte counters (may be null; must outlive the client)
  // Level "all": one span per chunk request on a track per server ("push" /
  // "pull" / "init", chunk, server, bytes, latency_us); null = none.
  TraceRecorder* trace = nullptr;
  const SecurityContext* security = nullptr;  // CURVE client keys (common/wire/security.h); null = plain
  // ps.wire_dtype: kFloat32, or kBFloat16 (pushes narrowed here, pull replies
  // asked in bfloat16 and widened into the caller's buffer; init stays float32).
  DType wire_dtype = DType::kFloat32;
};

// Per-ticket results: for pushes, the staleness the servers reported (async).
struct TicketResult {
  std::int64_t max_staleness = 0;
  double mean_staleness = 0.0;
  std::int64_t min_version = 0;  // pulls: lowest chunk version received
  std::int64_t max_parked_us = 0;  // pulls: longest a chunk's pull was held at its server
  // Pulls with step kPullRejoinProbe: (chunk, the step the server expects
  // this worker to push next for it), as the replies came.
  std::vector<std::pair<std::int64_t, std::int64_t>> next_steps;
};

class KVClient {
 public:
  using Ticket = std::uint64_t;

  // Connections from `transport` (outliving the client); with a scheduler
  // client, `transport` must be the one it uses (wait() waits on both).
  KVClient(Transport& transport, const ShardMap& map, const std::vector<std::string>& server_endpoints,
           KVClientOptions options, SchedulerClient* scheduler = nullptr);

  // `flat` is the whole flat buffer (map.total_elems() floats); the request
  // covers the given chunk ids, or all chunks when `keys` is empty.
  // `keep_alive` (may be null) owns `flat`'s memory: each chunk's frame holds
  // it until the transport has sent or dropped the frame, so a worker that
  // unwinds past its pushes (an abort, a failure) never has memory it freed
  // read by a frame still queued (a woken, dropped worker once died of that
  // in ZeroMQ's I/O thread: its arena was unmapped under a queued push).
  Ticket push(std::span<const float> flat, std::int64_t step, double lr, std::span<const std::int64_t> keys = {},
              std::shared_ptr<const void> keep_alive = nullptr);
  // Skip pushes (no payload): this worker contributes nothing to `step` of
  // these chunks (workload.on_nonfinite = "skip"; server/consistency.h).
  // Their replies count in no staleness.
  Ticket push_skip(std::int64_t step, std::span<const std::int64_t> keys = {});
  // `step`: the step the weights are for (the servers' policy decides when
  // they may answer: sync, version >= step; ssp, within the bound).
  Ticket pull(std::span<float> flat, std::int64_t step, std::span<const std::int64_t> keys = {});
  Ticket init(std::span<const float> flat, std::span<const std::int64_t> keys = {});
  // bfloat16 already converted (ps.wire_dtype = "bfloat16" only; ConfigError
  // otherwise): push_bfloat16 sends `flat`'s chunks zero-copy, as push() does
  // floats (the copy pipeline's engine narrowed them: no host work here);
  // pull_bfloat16 writes each reply's bfloat16 as received into `flat`,
  // not widened (the engine widens it on its way into the model).
  Ticket push_bfloat16(std::span<const std::uint16_t> flat, std::int64_t step, double lr,
                       std::span<const std::int64_t> keys = {}, std::shared_ptr<const void> keep_alive = nullptr);
  Ticket pull_bfloat16(std::span<std::uint16_t> flat, std::int64_t step, std::span<const std::int64_t> keys = {});
  TicketResult wait(Ticket ticket);
  // Called with a chunk's id as soon as a pull reply has been written into
  // the caller's buffer (by whichever wait() receives it; the copy pipeline
  // uploads the chunk then: worker/client/copy_pipeline.h). Empty: none.
  void set_pull_arrival(std::function<void(std::int64_t)> on_chunk) { pull_arrival_ = std::move(on_chunk); }

  // Pulls into `flat` (the whole flat buffer, page aligned: the model's own
  // parameters) may map a large chunk's pages from the server's arena instead
  // of copying them (worker/client/pull_pages.h: the reply is held until this
  // client pushes that chunk, and a chunk's range is not to be read between
  // its push and its next reply). Empty: none any more, every mapped range
  // copied into private memory first. Its owner frees it only after this or
  // by unmapping it whole.
  void map_pulls_into(std::span<float> flat) { pages_.set_buffer(flat); }
  const PullPages& pull_pages() const { return pages_; }

  const ShardMap& shard_map() const { return map_; }
  // Requests sent again to servers that came back after a restart.
  std::int64_t resent_requests() const { return resent_; }

 private:
  struct Pending {
    Ticket ticket;
    MsgType expect;
    std::int64_t key;
    float* pull_dest = nullptr;  // pulls: where the chunk goes
    std::int64_t sent_us = 0;    // traced: when the request was sent
    bool skip = false;           // a skip push
    Header header;               // as sent: a server restart resends it
    const float* src = nullptr;  // push, init: the chunk's values (the caller keeps them until wait())
    bool probe = false;          // a rejoin probe (pull at kPullRejoinProbe)
    std::shared_ptr<const void> keep_alive{};  // push: the owner of `src`'s memory (may be null)
    const std::uint16_t* src_bf16 = nullptr;  // push_bfloat16: the chunk's narrowed values (instead of src)
    std::uint16_t* pull_dest_bf16 = nullptr;  // pull_bfloat16: where the chunk goes, not widened
  };
  // A request's flat buffers: float32, or bfloat16 (push_bfloat16, pull_bfloat16).
  struct Flat {
    std::span<const float> src;
    float* dest = nullptr;
    const std::uint16_t* src_bf16 = nullptr;
    std::uint16_t* dest_bf16 = nullptr;
  };
  struct TicketState {
    std::size_t outstanding = 0;
    std::string error;
    Status error_status = Status::kOk;
    int error_server = -1;
    TicketResult result;
    std::int64_t staleness_sum = 0;
    std::size_t replies = 0;
    bool first_version = true;
  };

  Ticket start(MsgType type, const Flat& flat, std::int64_t step, double lr, std::span<const std::int64_t> keys,
               bool skip = false, const std::shared_ptr<const void>& keep_alive = nullptr);
  // Several chunks per message (kPushChunks, kPullChunks): how many of
  // keys[at..] go in the message that starts at keys[at]: a run of
  // consecutive chunk ids of one server, next to each other in the flat
  // buffer, at most kMaxChunksPerMessage; pushes only float32 (a bfloat16
  // push narrows per chunk) and at most max_run_elems_ elements (the
  // largest chunk: the servers' sockets take no larger frame). 1 = a
  // single-chunk message; init always goes one chunk a message.
  std::size_t run_length(MsgType type, std::span<const std::int64_t> keys, std::size_t at, bool skip) const;
  // Sends keys[0..n) of one run: a Pending per chunk, with the header of the
  // single-chunk request it stands for (chunk_request: a server restart
  // resends them one by one), and one message.
  void send_run(MsgType type, const Flat& flat, std::int64_t step, double lr, std::span<const std::int64_t> keys,
                bool skip, const std::shared_ptr<const void>& keep_alive, Ticket ticket);
  void check_bfloat16(std::size_t num_elems, const char* op) const;
  // A pull reply into its destination (float32, widened, or bfloat16 as received).
  void write_pull_reply(Message& msg, const Pending& p, std::size_t server);
  void send_to(std::size_t server, const Header& h, Payload payload);
  void check_flat(std::size_t num_elems, const char* op) const;
  Payload narrow(std::int64_t key, std::span<const float> values);
  void receive_from(std::size_t server);
  std::unique_ptr<Connection> connect_server(std::size_t server, const std::string& endpoint);
  Payload payload_of(const Pending& p);
  // The servers the scheduler announced back since the last call: new
  // socket, every unanswered request to it sent again. Returns whether any.
  bool reconnect_restarted();
  void complete(Message& msg, std::size_t server);
  void trace_reply(const Pending& p, std::size_t server);

  Transport& transport_;
  ShardMap map_;
  KVClientOptions options_;
  SchedulerClient* scheduler_;
  std::vector<std::unique_ptr<Connection>> conns_;  // one per server
  std::vector<std::string> endpoints_;
  std::uint64_t next_request_id_ = 1;
  Ticket next_ticket_ = 1;
  std::unordered_map<std::uint64_t, Pending> pending_;      // request id -> request
  std::unordered_map<Ticket, TicketState> tickets_;
  std::vector<float> scratch_;
  std::vector<std::int64_t> all_keys_;  // 0..chunks-1: the keys of a request for every chunk
  std::int64_t max_run_elems_ = 0;      // the largest chunk's elements: a push run's cap
  // Pulls of a model bigger than the last-level cache can hold write the
  // weights with streaming stores (Message::copy_floats_to): nothing of them
  // would be in the caches when the model reads them, and the stores do not
  // read the destination's old lines first (a third of a copy's memory traffic).
  bool stream_pulls_ = false;  // above kStreamWeightsAboveBytes (common/base/stream_copy.h)
  // bfloat16 pushes: per chunk, the narrowed gradient ZeroMQ sends zero-copy
  // (reused once ZeroMQ has let go of it).
  std::vector<std::shared_ptr<std::vector<std::uint16_t>>> narrowed_;
  bool trace_chunks_ = false;
  std::vector<std::uint32_t> trace_tracks_;     // per server
  std::vector<std::int64_t> trace_track_end_;   // per server: end of its last span
  std::int64_t resent_ = 0;                     // requests sent again after server restarts
  // Per chunk: the highest step this worker pushed (-1: none). After a
  // server restart, a probe pull for the step after it tells the rejoined
  // server this worker's clock of the chunk even when no request to it was
  // unanswered (its reply, ticket 0, is dropped).
  std::vector<std::int64_t> last_pushed_;
  std::function<void(std::int64_t)> pull_arrival_;  // set_pull_arrival
  PullPages pages_{transport_, map_};  // map_pulls_into
};

// Throws what an error reply of `server` with `status` means at the worker:
// ServerError (rejected, not owner, bad request), AbortedError (aborted),
// ProtocolError (an error reply claiming status ok).
[[noreturn]] void throw_server_error(Status status, int server, const std::string& text);

}  // namespace pstrain
