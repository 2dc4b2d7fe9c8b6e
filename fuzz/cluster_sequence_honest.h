// The cluster_sequence harness's honest worker 0 (fuzz/cluster_sequence.cc):
// its connections to the scheduler and the server, what it reads there
// (every message judged: its register reply, barrier replies only for the
// barriers it entered and in order, membership news, a membership change
// (answered through the store, as a worker does), an abort only when the
// input may cause one), its heartbeats, its barriers, and the checks
// made through it (the scheduler still answers; no peer changed its state
// on the server).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/math/shard_map.h"
#include "common/transport/zmq/zmq_socket.h"
#include "common/wire/protocol.h"
#include "common/wire/wire_archive.h"
#include "fuzz/cluster_sequence_peers.h"

namespace pstrain::fuzz_cluster {

// What worker 0 needs of the harness.
class HarnessHooks {
 public:
  virtual ~HarnessHooks() = default;
  [[noreturn]] virtual void finding_with_nodes(const std::string& what) = 0;
  virtual void drain_peers() = 0;  // reads what has come back to the peers, without waiting
  // Whether the job's abort, for reason `why`, is one the input may cause.
  virtual bool abort_excused(const std::string& why) const = 0;
  virtual void job_ended() = 0;             // an excused abort came: the job has ended
  virtual bool job_may_have_ended() const = 0;
};

inline Header honest_header(MsgType type) {
  Header h;
  h.type = type;
  h.role = Role::kWorker;
  h.sender = 0;
  return h;
}

class HonestWorker {
 public:
  HonestWorker(zmq::context_t& ctx, HarnessHooks& hooks) : ctx_(ctx), hooks_(hooks) {
    sched_.emplace(make_socket(ctx_, zmq::socket_type::dealer, peer_socket_options()));
    connect_socket(*sched_, kScheduler);
  }
  void close() {
    server_.reset();
    sched_.reset();
  }

  bool has_rank() const { return !token_.empty(); }
  bool waiting_at_barrier() const { return released_ < entered_; }
  std::int64_t barriers_released() const { return released_; }
  void stop_heartbeats() { quiet_ = true; }
  zmq::socket_t& scheduler_socket() { return *sched_; }

  // Registers first, and waits until the scheduler has taken it (a refused
  // heartbeat on the same connection comes back after the register was
  // handled), so no input can take rank 0.
  void register_first() {
    RegisterRequest req;
    req.role = Role::kWorker;
    req.requested_rank = 0;
    req.host = "honest";
    req.job_fingerprint = fingerprint();
    req.layout = job_layout();
    Header reg = honest_header(MsgType::kRegister);
    reg.sender = -1;
    send_body(*sched_, reg, wire_encode(req));
    send_raw(*sched_, honest_header(MsgType::kHeartbeat), std::nullopt);
    if (!receive(MsgType::kError, "its register's sync")) {
      hooks_.finding_with_nodes("the scheduler did not answer worker 0's registration probe");
    }
  }

  // Reads what is queued on the scheduler connection (waiting up to `wait`
  // for the first message): the register reply, barrier replies, membership
  // news and heartbeats are taken here; an abort must be excused (then the
  // job has ended); replies and errors are kept for receive(). Once it has
  // its rank, worker 0 heartbeats on that connection every kHonestHeartbeatMs.
  void pump(milliseconds wait = milliseconds(0)) {
    const auto now = std::chrono::steady_clock::now();
    if (has_rank() && !quiet_ && now - last_beat_ >= milliseconds(kHonestHeartbeatMs)) {
      last_beat_ = now;
      send_raw(*sched_, honest_header(MsgType::kHeartbeat), std::nullopt);
    }
    for (int k = 0; k < 64; ++k) {
      std::optional<ZmqEnvelope> env;
      try {
        env = receive_message(*sched_, false, k == 0 ? wait : milliseconds(0), DecodeLimits{});
      } catch (const ProtocolError& e) {
        hooks_.finding_with_nodes(std::string("worker 0 got a malformed message: ") + e.what());
      }
      if (!env) return;
      take(std::move(env->message));
    }
  }

  // Waits for a message of `type` on the scheduler (or server) connection,
  // or an error, or (scheduler) the job's excused abort.
  std::optional<Message> receive(MsgType type, const std::string& what, bool on_server = false) {
    const auto deadline = std::chrono::steady_clock::now() + milliseconds(kReplyBoundMs);
    while (std::chrono::steady_clock::now() < deadline) {
      pump(on_server ? milliseconds(0) : milliseconds(5));
      hooks_.drain_peers();  // keep the peers' queues moving
      std::optional<Message> m = on_server ? from_server() : next();
      if (!m) continue;
      const MsgType t = m->header.type;
      if (t == type || t == MsgType::kError || (!on_server && t == MsgType::kAbort)) return m;
      hooks_.finding_with_nodes("worker 0 got an unexpected " + std::string(to_string(t)) + " while waiting for " + what);
    }
    return std::nullopt;
  }

  // Waits until the rendezvous gave worker 0 its rank. A refusal or abort
  // first is a finding unless `excused`.
  void wait_rank(bool excused) {
    const auto deadline = std::chrono::steady_clock::now() + milliseconds(kReplyBoundMs);
    while (!has_rank()) {
      if (std::chrono::steady_clock::now() > deadline) {
        hooks_.finding_with_nodes("the rendezvous did not complete within " + std::to_string(kReplyBoundMs) + " ms");
      }
      pump(milliseconds(5));
      hooks_.drain_peers();
      const std::optional<Message> m = next();
      if (!m) continue;
      if (excused || hooks_.job_may_have_ended()) return;
      hooks_.finding_with_nodes("worker 0's registration ended in " + std::string(to_string(m->header.type)) + ": " +
                                m->text_payload());
    }
  }

  // Enters its next barrier (once it has its rank: before the rendezvous
  // the scheduler refuses barriers).
  void enter_barrier() {
    pump();
    if (!has_rank() || hooks_.job_may_have_ended()) return;
    Header b = honest_header(MsgType::kBarrier);
    b.key = entered_++;
    send_body(*sched_, b, "honest " + std::to_string(b.key));
  }

  void check_scheduler_answers() {
    Header set = honest_header(MsgType::kStoreSet);
    set.request_id = 77;
    send_body(*sched_, set, wire_encode(StoreEntry{"fuzz/check", "ok"}));
    auto m = receive(MsgType::kStoreReply, "a store set");
    if (!m) {
      hooks_.finding_with_nodes("the scheduler did not answer worker 0's store set within " +
                                std::to_string(kReplyBoundMs) + " ms");
    }
    if (m->header.type == MsgType::kAbort) return;  // excused (pump): the job has ended
    if (m->header.type != MsgType::kStoreReply) hooks_.finding_with_nodes("worker 0's store set was refused: " + m->text_payload());
  }

  // Its first push (a skip at step 0) is accepted on every chunk of the
  // server, and no chunk passed version 1.
  void check_server_state(const ShardMap& map) {
    for (const std::int64_t key : map.chunks_of(0)) {
      const auto n = static_cast<std::size_t>(map.chunk(key).num_elems);
      Header init = honest_header(MsgType::kInit);
      init.key = key;
      init.dtype = DType::kFloat32;
      init.num_elems = static_cast<std::int64_t>(n);
      send_raw(*server_, init, floats_bytes(std::vector<float>(n, 1.0f)));
      auto r = server_reply(MsgType::kInitReply, "init", key);
      if (!r) return;  // the job ended meanwhile (an excused abort): the server is going
      if (r->header.type != MsgType::kInitReply && r->text_payload().find("already initialized") == std::string::npos) {
        hooks_.finding_with_nodes("worker 0's init of chunk " + std::to_string(key) + " was refused: " + r->text_payload());
      }
      Header skip = honest_header(MsgType::kPush);
      skip.key = key;
      skip.step = 0;
      skip.aux = kPushSkip;
      send_raw(*server_, skip, std::nullopt);
      r = server_reply(MsgType::kPushReply, "push", key);
      if (!r) return;
      if (r->header.type != MsgType::kPushReply) {
        hooks_.finding_with_nodes("worker 0's first push (step 0) of chunk " + std::to_string(key) +
                                  " was refused: " + r->text_payload());
      }
      Header pull = honest_header(MsgType::kPull);
      pull.key = key;
      send_raw(*server_, pull, std::nullopt);
      r = server_reply(MsgType::kPullReply, "pull", key);
      if (!r) return;
      if (r->header.type != MsgType::kPullReply) hooks_.finding_with_nodes("worker 0's pull was refused: " + r->text_payload());
      if (r->header.version > 1) {
        hooks_.finding_with_nodes("chunk " + std::to_string(key) + " is at version " +
                                  std::to_string(r->header.version) + " though worker 0 pushed only step 0");
      }
      if (r->header.num_elems != static_cast<std::int64_t>(n)) hooks_.finding_with_nodes("pull reply of the wrong size");
    }
  }

 private:
  void take(Message m) {
    switch (m.header.type) {
      case MsgType::kHeartbeat:
      case MsgType::kDropped:   // a peer dropped (its silence, its abort, its early done)
      case MsgType::kRejoined:  // a peer took a dropped rank back
        return;
      case MsgType::kMembershipChange:  // a join started a change: it answers where it is
        answer_change(m.header.key);
        return;
      case MsgType::kStoreReply:
      case MsgType::kError:
        // The reply to an answer (refused once the change is gone: a peer's forged answers may decide it).
        if (m.header.request_id == kAnswerRequest) return;
        inbox_.push_back(std::move(m));
        return;
      case MsgType::kRegisterReply:  // wait_rank waits for the rank it gives
        if (!has_rank()) take_register_reply(m);
        return;
      case MsgType::kBarrierReply:
        if (m.header.key != released_ || released_ >= entered_) {
          hooks_.finding_with_nodes("worker 0 got a reply for barrier " + std::to_string(m.header.key) +
                                    ", having entered " + std::to_string(entered_) + " and seen " +
                                    std::to_string(released_) + " released");
        }
        ++released_;
        return;
      case MsgType::kAbort:
        if (!hooks_.abort_excused(m.text_payload())) hooks_.finding_with_nodes("the job aborted: " + m.text_payload());
        hooks_.job_ended();
        inbox_.push_back(std::move(m));
        return;
      default:
        inbox_.push_back(std::move(m));
    }
  }

  // Its answer to membership change `change`: its next step is step
  // `answers_ + 1` of epoch 0 (a later change: a later step), the job's step as well.
  void answer_change(std::int64_t change) {
    const std::string step = std::to_string(++answers_);
    Header set = honest_header(MsgType::kStoreSet);
    set.request_id = kAnswerRequest;
    send_body(*sched_, set,
              wire_encode(StoreEntry{std::string(kMembershipPrefix) + std::to_string(change) + "/0", "0 " + step + " " + step}));
  }

  void take_register_reply(const Message& m) {
    const std::string body = m.text_payload();
    const auto reply = wire_decode<RegisterReply>(std::as_bytes(std::span(body.data(), body.size())), "register reply");
    if (reply.rank != 0) hooks_.finding_with_nodes("worker 0 was given rank " + std::to_string(reply.rank));
    token_ = reply.token;
    server_.emplace(make_socket(ctx_, zmq::socket_type::dealer, peer_socket_options()));
    server_->set(zmq::sockopt::routing_id, "w" + token_);
    connect_socket(*server_, kServer);
  }

  std::optional<Message> next() {
    if (inbox_.empty()) return std::nullopt;
    Message m = std::move(inbox_.front());
    inbox_.erase(inbox_.begin());
    return m;
  }

  std::optional<Message> from_server() {
    std::optional<ZmqEnvelope> env;
    try {
      env = receive_message(*server_, false, milliseconds(5), DecodeLimits{});
    } catch (const ProtocolError& e) {
      hooks_.finding_with_nodes(std::string("worker 0 got a malformed message from the server: ") + e.what());
    }
    if (!env) return std::nullopt;
    return std::move(env->message);
  }

  // The server's reply to worker 0's `what` of chunk `key`; nullopt when the
  // job has ended meanwhile. No reply within the bound is a finding.
  std::optional<Message> server_reply(MsgType type, const std::string& what, std::int64_t key) {
    auto r = receive(type, what + " of chunk " + std::to_string(key), true);
    if (hooks_.job_may_have_ended()) return std::nullopt;
    if (!r) {
      hooks_.finding_with_nodes("the server did not answer worker 0's " + what + " within " +
                                std::to_string(kReplyBoundMs) + " ms");
    }
    return r;
  }

  zmq::context_t& ctx_;
  HarnessHooks& hooks_;
  std::optional<zmq::socket_t> sched_, server_;
  std::string token_;
  std::vector<Message> inbox_;  // replies and errors, for receive()
  std::int64_t entered_ = 0;    // barriers entered
  std::int64_t released_ = 0;   // and seen released
  std::int64_t answers_ = 0;    // membership changes answered
  static constexpr std::uint64_t kAnswerRequest = 78;  // the request id of its answers
  std::chrono::steady_clock::time_point last_beat_{};
  bool quiet_ = false;  // it has aborted: no more heartbeats
};

}  // namespace pstrain::fuzz_cluster
