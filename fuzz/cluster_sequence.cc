// libFuzzer target: a structure-aware harness. Each input is decoded into a
// sequence of operations by a few hostile peers against a REAL scheduler
// and server (threads over inproc:// in one fresh zmq context per input):
// register (any role, rank, fingerprint, layout), scheduler messages
// (heartbeat, barrier, done, abort, store set/get, ...) in any node's name,
// server requests (init, push, pull, skip) with chosen chunk, step, sizes,
// dtype, learning rate and connection, raw bytes, leaving with replies
// unread, and waiting for replies; membership changes: done, drop (a
// registered worker's abort, or its silence under "continue" / "restart"),
// rejoin (a --rejoin registration), join (a --join registration taking the
// elastic job's vacant slot, the workers' answers to the membership change
// it starts, the server's admission of the joiner, its acknowledgement
// through the store, the change's boundary), under the failure policy the input's
// first byte picks (abort, continue, restart). An honest worker 0 registers
// first and is driven by the input only to enter barriers. After the
// sequence the harness checks invariants and abort()s (a finding) when one
// is broken:
//  - the scheduler and the server still run and answer a fresh valid request
//    of the honest worker within a bound (store set; init, push, pull);
//  - no peer changed worker 0's state: its first push (a skip at step 0)
//    is accepted on every chunk, the chunks' version is at most 1, and it
//    never gets a barrier reply it did not ask for, nor one out of order;
//  - no honest worker waits past the job's timeout: worker 0 waits at a
//    barrier, every peer holding a worker rank on its own connection says
//    done, and then (when every other worker has left: done, dropped for its
//    silence or its abort) worker 0's wait ends within kBarrierBoundMs, by
//    the barrier's release or by the job's abort naming the early done;
//  - the job ends only when a node that registered on its own connection
//    says so (an abort), and then with AbortedError; the honest worker's
//    abort ends both nodes within a bound;
//  - a node's memory stays under its budget (cluster_sequence_memory.h):
//    after every op the scheduler's and the server's unsent replies are
//    within their limits' bound, and back to zero on a running node once
//    every peer has closed its connections (replies left unread included);
//  - no sanitizer report, no crash.
// Excused (documented behaviour, not findings): with security off, a peer
// that registers as a server before the real one takes its slot (the real
// server's registration is refused); a peer that registered and aborts
// ends the job (under "continue" / "restart" a registered worker's abort
// drops it instead); a peer's early done ends the job under "abort" once
// it strands a barrier; a silent peer server ends it under "continue" /
// "restart"; under those two, worker 0's final abort drops it, and the job
// may then end normally (its other workers done or dropped). Parked-pull
// expiry is not reached (timeout_ms stays above an input's runtime).
//
// PSTRAIN_FUZZ_LOG=info shows the nodes' log lines for an input;
// PSTRAIN_FUZZ_TIMING=1 where its time goes (about 50 ms: fresh threads,
// sockets and context per input, so a finding replays alone). Leak
// detection stays on: ZeroMQ's threads have not tripped it.
//
// Input format (fuzz/make_seeds.cc writes seeds in it): the failure policy
// (byte % 3: abort, continue, restart), then a sequence of ops, each a byte
// `op` (kind = op % 8, peer = op / 8 % kPeers) and its argument bytes; bytes
// past the end read as 0. See the Op comments below.
#include <cerrno>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iterator>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/base/errors.h"
#include "common/config/job_fingerprint.h"
#include "common/base/log.h"
#include "common/wire/protocol.h"
#include "common/math/shard_map.h"
#include "common/transport/transport.h"
#include "common/wire/wire_archive.h"
#include "fuzz/cluster_sequence_honest.h"
#include "fuzz/cluster_sequence_memory.h"
#include "fuzz/cluster_sequence_peers.h"
#include "fuzz/fuzz_input.h"
#include "scheduler/scheduler.h"
#include "server/server.h"
#include "server/server_options.h"
#include "common/transport/zmq/zmq_transport.h"
#include "common/transport/zmq/zmq_socket.h"

using namespace pstrain;
using std::chrono::milliseconds;

namespace {

using namespace pstrain::fuzz_cluster;

class Harness : public HarnessHooks {
 public:
  explicit Harness(WorkerFailurePolicy policy)
      : policy_(policy),
        log_("fuzz scheduler", log_level()),
        map_(job_layout(), 1, kPartitionBytes),
        scheduler_(std::make_unique<ZmqTransport>(ctx_), scheduler_options(), log_),
        server_log_("fuzz server", log_level()),
        server_(std::make_unique<ZmqTransport>(ctx_), server_options(), server_log_) {
    scheduler_thread_ = std::thread([this] { run_node(scheduler_error_, scheduler_done_, [this] { scheduler_.run(); }); });
    server_thread_ = std::thread([this] { run_node(server_error_, server_done_, [this] { server_.run(); }); });
    honest_.register_first();
  }

  ~Harness() override {
    for (Peer& p : peers_) close(p);
    fillers_.clear();
    honest_.close();
    if (scheduler_thread_.joinable()) scheduler_thread_.join();
    if (server_thread_.joinable()) server_thread_.join();
  }

  void run_ops(fuzz::Input& in) {
    for (int n = 0; n < kMaxOps && in.left() > 0; ++n) {
      const std::uint8_t op = in.byte();
      Peer& p = peers_[static_cast<std::size_t>(op / 8 % kPeers)];
      honest_.pump();
      switch (op % 8) {
        case 0: op_register(p, in); break;
        case 1: op_scheduler(p, in); break;
        case 2: op_server(p, in); break;
        case 3: op_raw(p, in); break;
        case 4: close(p); break;  // leaves, replies unread
        case 5:  // peer 1's: worker 0 enters its next barrier; else a wait for replies
          if (op / 8 % kPeers == 1) {
            honest_.enter_barrier();
          } else {
            drain(milliseconds(2));
          }
          break;
        case 6: p.leave_after_send = true; break;  // the next send is hit and run
        case 7: op_heartbeat(p, in); break;
      }
      check_memory_bound();
    }
    drain(milliseconds(1));
    check_memory_bound();
  }

  void check_and_end() {
    complete_rendezvous();
    if (!legit_end_) {
      honest_.check_scheduler_answers();
      if (!server_contested_ && !legit_end_) honest_.check_server_state(map_);
    }
    if (!legit_end_) check_barrier_wait();
    check_memory_given_back();
    // The honest worker fails on purpose: the job must end, promptly, with AbortedError.
    Header abort = header(MsgType::kAbort, Role::kWorker, 0);
    send_body(honest_.scheduler_socket(), abort, "fuzz input done");
    honest_.stop_heartbeats();
    const auto deadline = std::chrono::steady_clock::now() + milliseconds(kEndBoundMs);
    while (!(scheduler_done_.load() && server_done_.load())) {
      if (std::chrono::steady_clock::now() > deadline) {
        fail_with_nodes(std::string("the job did not end within ") + std::to_string(kEndBoundMs) + " ms of worker 0's abort (" +
                (scheduler_done_.load() ? "scheduler ended" : "scheduler still running") + ", " +
                (server_done_.load() ? "server ended" : "server still running") + ")");
      }
      drain(milliseconds(5));
    }
    scheduler_thread_.join();
    server_thread_.join();
    // Under "continue" / "restart" worker 0's abort drops it: the job ends
    // normally once its other workers are done or dropped.
    const bool may_end_normally = policy_ != WorkerFailurePolicy::kAbort;
    expect_aborted("scheduler", scheduler_error_, false, may_end_normally);
    // A server whose registration was never answered (a peer failed the job
    // during registration, before the server's register was taken) ends with
    // its own registration timeout: not a finding.
    expect_aborted("server", server_error_, server_contested_ || (legit_end_ && !server_registered_.load()),
                   may_end_normally);
  }

 private:
  SchedulerOptions scheduler_options() {
    SchedulerOptions o;
    o.num_servers = 1;
    o.num_workers = kWorkers;
    o.cluster = cluster_config(policy_);
    o.bind_endpoint = kScheduler;
    return o;
  }

  ServerOptions server_options() {
    RunConfig config;
    config.mode = Mode::kSync;
    config.ps.partition_bytes = kPartitionBytes;
    config.cluster = cluster_config(policy_);
    config.cluster.heartbeat_timeout_ms = 3000;  // bounds its wait for a registration reply (see kEndBoundMs)
    config.cluster.scheduler = kScheduler;
    config.optimizer.momentum = 0.0;
    ServerOptions o = pstrain::server_options(config);  // its job fingerprint is fingerprint()
    o.bind_endpoint = kServer;
    o.requested_rank = 0;
    o.on_registered = [this](int) { server_registered_.store(true); };
    return o;
  }

  [[noreturn]] void fail_with_nodes(const std::string& what) {
    finding(what + " [scheduler " + describe_end(scheduler_done_, scheduler_error_) + "; server " +
            describe_end(server_done_, server_error_) + "]");
  }

  void expect_aborted(const char* node, const std::exception_ptr& error, bool excused, bool may_end_normally) {
    if (!error && may_end_normally) return;
    if (!error) fail_with_nodes(std::string(node) + " ended normally, but no worker finished");
    try {
      std::rethrow_exception(error);
    } catch (const AbortedError&) {
    } catch (const std::exception& e) {
      if (!excused) fail_with_nodes(std::string(node) + " failed: " + e.what());
    }
  }

  // HarnessHooks, for worker 0.
  [[noreturn]] void finding_with_nodes(const std::string& what) override { fail_with_nodes(what); }
  void drain_peers() override { drain(milliseconds(0)); }
  void job_ended() override { legit_end_ = true; }
  bool job_may_have_ended() const override { return legit_end_; }
  bool abort_excused(const std::string& why) const override {
    if (legit_end_) return true;
    if (peer_done_ && why.find("said done before the end of the job") != std::string::npos) return true;
    // A silent peer in the server slot (a silent worker is dropped instead).
    return policy_ != WorkerFailurePolicy::kAbort && why.find("sent no heartbeat") != std::string::npos;
  }

  // The invariant "no honest worker waits past the job's timeout": worker 0
  // waits at a barrier; every peer holding a worker rank on the connection
  // it registered on says done (an early done: it never passed the final
  // barrier). When every other worker has then left or will be dropped for
  // its silence, the wait must end within kBarrierBoundMs: released, or the
  // job aborted naming the early done.
  void check_barrier_wait() {
    if (!honest_.has_rank()) return;  // the rendezvous never completed for worker 0
    if (!honest_.waiting_at_barrier()) honest_.enter_barrier();
    bool every_rank_answers = true;  // a rank held by a silent registration stays alive under "abort" (60 s)
    for (int rank = 1; rank < kSlots; ++rank) {
      if (rank >= kWorkers && joined_.count(rank) == 0) continue;  // the vacant slot nobody joined
      bool open = false;
      for (Peer& p : peers_) {
        if (!p.worker || p.rank != rank || !p.sched || !p.rank_here) continue;
        send_raw(*p.sched, header(MsgType::kDone, Role::kWorker, rank), std::nullopt);
        peer_done_ = true;
        open = true;
      }
      every_rank_answers = every_rank_answers && open;
    }
    if (policy_ == WorkerFailurePolicy::kAbort && !every_rank_answers) return;  // the barrier may still complete
    const auto deadline = std::chrono::steady_clock::now() + milliseconds(kBarrierBoundMs);
    while (honest_.waiting_at_barrier() && !legit_end_) {
      if (std::chrono::steady_clock::now() > deadline) {
        fail_with_nodes("worker 0 waited at barrier " + std::to_string(honest_.barriers_released()) +
                        " for more than " + std::to_string(kBarrierBoundMs) +
                        " ms after every other worker left (policy " + std::string(to_string(policy_)) + ")");
      }
      honest_.pump(milliseconds(5));
      drain(milliseconds(0));
    }
  }

  // The invariant "a node's memory stays under its budget" (cluster_sequence_memory.h), now.
  void check_memory_bound() {
    std::string why = over_budget("scheduler", scheduler_.unsent_reply_bytes(), scheduler_.unsent_reply_limit(), true);
    if (why.empty()) why = over_budget("server", server_.unsent_reply_bytes(), server_.unsent_reply_limit(), false);
    if (!why.empty()) fail_with_nodes(why);
  }

  // Every peer closes (what was queued for it goes); worker 0 and the fillers
  // read theirs: a running node's unsent replies fall back to zero.
  void check_memory_given_back() {
    for (Peer& p : peers_) close(p);
    const auto deadline = std::chrono::steady_clock::now() + milliseconds(kMemoryBackBoundMs);
    for (std::int64_t sched = 1, server = 1; sched != 0 || server != 0; honest_.pump(milliseconds(1)), drain(milliseconds(0))) {
      check_memory_bound();
      sched = scheduler_done_.load() ? 0 : scheduler_.unsent_reply_bytes();
      server = server_done_.load() ? 0 : server_.unsent_reply_bytes();
      if ((sched != 0 || server != 0) && std::chrono::steady_clock::now() > deadline) {
        fail_with_nodes("unsent replies not given back within " + std::to_string(kMemoryBackBoundMs) + " ms of every peer closing: " +
                        std::to_string(sched) + " bytes at the scheduler, " + std::to_string(server) + " at the server");
      }
    }
  }

  // If the input left the rendezvous open, honest fillers register until
  // it completes (those beyond the job's counts are refused).
  void complete_rendezvous() {
    if (honest_.has_rank() || legit_end_) return;
    RegisterRequest req;
    req.role = Role::kWorker;
    req.host = "filler";
    req.job_fingerprint = fingerprint();
    req.layout = job_layout();
    for (int i = 0; i < kWorkers; ++i) {
      fillers_.emplace_back(make_socket(ctx_, zmq::socket_type::dealer, peer_socket_options()));
      connect_socket(fillers_.back(), kScheduler);
      send_body(fillers_.back(), header(MsgType::kRegister, Role::kWorker, -1), wire_encode(req));
    }
    honest_.wait_rank(server_contested_);
  }

  zmq::socket_t& sched_socket(Peer& p) {
    if (!p.sched) {
      p.sched.emplace(make_socket(ctx_, zmq::socket_type::dealer, peer_socket_options()));
      connect_socket(*p.sched, kScheduler);
    }
    return *p.sched;
  }

  zmq::socket_t& server_socket(Peer& p, bool named) {
    if (!p.server) {
      p.server.emplace(make_socket(ctx_, zmq::socket_type::dealer, peer_socket_options()));
      if (named && !p.token.empty()) p.server->set(zmq::sockopt::routing_id, "w" + p.token);
      connect_socket(*p.server, kServer);
    }
    return *p.server;
  }

  void after_send(Peer& p) {
    if (p.leave_after_send) close(p);
  }

  static void close(Peer& p) {
    p.sched.reset();
    p.heartbeat.reset();
    p.server.reset();
    p.registered_here = false;
    p.rank_here = false;
    p.leave_after_send = false;
  }

  // Op 0: register. Bytes: flags (bit 0 server, bit 1 wrong fingerprint,
  // bits 2-3 layout: job / other / empty, bit 4 header role differs from
  // the body's, bit 5 malformed, bit 6 a rejoin: --rejoin of a dropped
  // rank, bit 7 a join: --join of the vacant slot), rank (b % 5 - 1).
  void op_register(Peer& p, fuzz::Input& in) {
    const std::uint8_t flags = in.byte();
    const int rank = in.byte() % 5 - 1;
    RegisterRequest req;
    req.role = (flags & 1) ? Role::kServer : Role::kWorker;
    req.requested_rank = rank;
    req.host = "peer";
    req.endpoint = (flags & 1) ? "inproc://fuzz-fake-server" : "";
    req.job_fingerprint = (flags & 2) ? "mode=async partition_bytes=1 servers=9 workers=9" : fingerprint();
    const int layout = (flags >> 2) % 4;
    if (layout == 0 || layout == 3) req.layout = job_layout();
    if (layout == 1) req.layout = other_layout();
    Role header_role = req.role;
    if (flags & 16) header_role = req.role == Role::kWorker ? Role::kServer : Role::kWorker;
    // A peer's server registration may take the real server's slot (no keys: documented).
    if (req.role == Role::kServer && header_role == Role::kServer && !(flags & 2)) server_contested_ = true;
    Header h = header(MsgType::kRegister, header_role, -1);
    if (flags & 64) h.aux = kRegisterRejoin;
    if (flags & 128) h.aux = kRegisterJoin;
    if (flags & 32) {
      send_raw(sched_socket(p), h, wire_encode(req));  // dtype none: a malformed register
    } else {
      send_body(sched_socket(p), h, wire_encode(req));
    }
    p.registered_here = true;
    after_send(p);
  }

  // Op 1: a message to the scheduler. Bytes: type, sender (b % 5 - 1; bit 7
  // of the type byte: the peer's own rank instead), key, value size / aux
  // (a store set with bit 6 of it: the sender's answer to membership change
  // 1 + key % 2, where it is: "0 2 2", "0 1 1" or "end" by size % 3).
  void op_scheduler(Peer& p, fuzz::Input& in) {
    static constexpr MsgType kTypes[] = {MsgType::kHeartbeat, MsgType::kBarrier,  MsgType::kDone,
                                         MsgType::kAbort,     MsgType::kStoreSet, MsgType::kStoreGet,
                                         MsgType::kShutdown,  MsgType::kPush,     MsgType::kRegisterReply,
                                         MsgType::kDropped};
    const std::uint8_t t = in.byte();
    const std::uint8_t who = in.byte();
    const std::uint8_t key = in.byte();
    const std::uint8_t size = in.byte();
    const MsgType type = kTypes[(t & 127) % std::size(kTypes)];
    const int sender = (t & 128) ? p.rank : who % 5 - 1;
    Header h = header(type, (who & 64) ? Role::kServer : Role::kWorker, sender);
    h.key = key % 4;
    h.request_id = key;
    std::optional<std::string> body;
    switch (type) {
      case MsgType::kBarrier: body = "b" + std::to_string(key % 4); break;
      case MsgType::kAbort: body = "forged failure"; break;
      case MsgType::kStoreSet:
        if (size & 64) {
          static constexpr const char* kAnswers[] = {"0 2 2", "0 1 1", "end"};
          body = wire_encode(StoreEntry{std::string(kMembershipPrefix) + std::to_string(1 + key % 2) + "/" +
                                            std::to_string(sender),
                                        kAnswers[size % 3]});
        } else {
          body = wire_encode(StoreEntry{size & 128 ? "" : "k" + std::to_string(key % 4), std::string(size % 9, 'v')});
        }
        break;
      case MsgType::kStoreGet:
        body = wire_encode(StoreEntry{"k" + std::to_string(key % 4), ""});
        h.aux = size % 3 == 0 ? 0 : (size % 3 == 1 ? 1 : std::numeric_limits<std::int64_t>::max());
        break;
      case MsgType::kPush: body = floats_bytes(std::vector<float>(4, 1.0f)); break;
      default: break;
    }
    if (body) h.dtype = type == MsgType::kPush ? DType::kFloat32 : DType::kBytes;
    if (body) h.num_elems = type == MsgType::kPush ? 4 : static_cast<std::int64_t>(body->size());
    // This peer's own worker rank on its own connection (known from its register reply: after the rendezvous).
    const bool own_worker = p.rank_here && p.worker && p.rank >= 1 && sender == p.rank && h.role == Role::kWorker;
    // A node that registered on this connection may fail the job (its rank is
    // not known before the rendezvous); under "continue" / "restart" a worker's
    // abort after the rendezvous drops it instead.
    if (type == MsgType::kAbort && p.registered_here && !(own_worker && policy_ != WorkerFailurePolicy::kAbort)) {
      legit_end_ = true;
    }
    if (type == MsgType::kDone && own_worker) peer_done_ = true;
    send_raw(sched_socket(p), h, body);
    after_send(p);
  }

  // Op 7: a heartbeat on a connection named "h" + the peer's token (or a
  // guessed one), in the name of `sender`.
  void op_heartbeat(Peer& p, fuzz::Input& in) {
    const std::uint8_t who = in.byte();
    if (!p.heartbeat) {
      p.heartbeat.emplace(make_socket(ctx_, zmq::socket_type::dealer, peer_socket_options()));
      const std::string token = p.token.empty() || (who & 128) ? std::string(32, 'a') : p.token;
      p.heartbeat->set(zmq::sockopt::routing_id, "h" + token);
      connect_socket(*p.heartbeat, kScheduler);
    }
    Header h = header(MsgType::kHeartbeat, (who & 64) ? Role::kServer : Role::kWorker, (who & 32) ? p.rank : who % 4 - 1);
    send_raw(*p.heartbeat, h, std::nullopt);
    after_send(p);
  }

  // Op 2: a request to the server. Bytes: type (bits 0-2: init, push,
  // pull, skip, pull bf16, barrier; bit 7: an unnamed connection), sender
  // (bit 7: the peer's own rank, else b % 4 - 1), chunk, step, payload
  // variant, learning rate variant.
  void op_server(Peer& p, fuzz::Input& in) {
    const std::uint8_t t = in.byte();
    const std::uint8_t who = in.byte();
    const std::uint8_t chunk = in.byte();
    const std::uint8_t step = in.byte();
    const std::uint8_t payload = in.byte();
    const std::uint8_t lr = in.byte();
    static constexpr MsgType kTypes[] = {MsgType::kInit, MsgType::kPush, MsgType::kPull,
                                         MsgType::kPush, MsgType::kPull, MsgType::kBarrier};
    const int kind = (t & 127) % 6;
    Header h = header(kTypes[kind], (who & 64) ? Role::kServer : Role::kWorker, (who & 128) ? p.rank : who % 4 - 1);
    const auto chunks = static_cast<std::int64_t>(map_.chunks().size());
    h.key = chunk == 255 ? std::numeric_limits<std::int64_t>::max() : static_cast<std::int64_t>(chunk % (chunks + 2)) - 1;
    h.step = step == 255 ? (std::int64_t{1} << 62) : step == 254 ? -1 : step % 4;
    static constexpr double kRates[] = {0.1, 0.0, -1.0, 1e30, std::numeric_limits<double>::quiet_NaN(),
                                        std::numeric_limits<double>::infinity()};
    h.lr = kRates[lr % std::size(kRates)];
    h.request_id = t;
    const std::int64_t n = h.key >= 0 && h.key < chunks ? map_.chunk(h.key).num_elems : 4;
    std::optional<std::string> body;
    if (kind == 3) {
      h.aux = kPushSkip;
    } else if (kind == 4) {
      h.aux = payload % 2 == 0 ? static_cast<std::int64_t>(DType::kBFloat16) : payload;  // a bad dtype code too
    } else if (kind <= 1) {
      std::int64_t count = n;
      if (payload % 5 == 1) count = n + 1;
      if (payload % 5 == 2) count = 0;
      std::vector<float> v(static_cast<std::size_t>(count), static_cast<float>(payload) - 100.0f);
      if (payload % 5 == 3 && !v.empty()) v[0] = std::numeric_limits<float>::quiet_NaN();
      if (payload % 5 == 4) {  // bfloat16
        h.dtype = DType::kBFloat16;
        h.num_elems = count;
        body = std::string(static_cast<std::size_t>(count) * 2, '\x3f');
      } else {
        h.dtype = DType::kFloat32;
        h.num_elems = count;
        body = floats_bytes(v);
      }
      if (payload & 128) h.num_elems += 1;  // header and frame disagree
      if (kind == 1 && (payload & 64)) h.aux = 7;  // neither gradient nor skip
    }
    send_raw(server_socket(p, !(t & 128)), h, body);
    after_send(p);
  }

  // Op 3: raw frames. Bytes: flags (bit 0 server, bit 1 two frames), size, bytes.
  void op_raw(Peer& p, fuzz::Input& in) {
    const std::uint8_t flags = in.byte();
    const auto n = static_cast<std::size_t>(in.byte());
    auto bytes = in.take(n);
    zmq::socket_t& s = (flags & 1) ? server_socket(p, true) : sched_socket(p);
    if (flags & 2) {
      zmq::message_t head = to_message(encode_header(header(MsgType::kPush, Role::kWorker, p.rank)));
      if (s.send(head, zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
        zmq::message_t body(bytes.data(), bytes.size());
        (void)s.send(body, zmq::send_flags::dontwait);
      }
    } else {
      zmq::message_t frame(bytes.data(), bytes.size());
      (void)s.send(frame, zmq::send_flags::dontwait);
    }
    after_send(p);
  }

  // Reads what has come back to every peer (replies must decode); register
  // replies give the peer its rank and token. Waits up to `wait` for the
  // first message, then reads whatever is queued.
  void drain(milliseconds wait) {
    struct Source {
      zmq::socket_t* socket;
      Peer* peer;  // null for a filler
      bool scheduler;
    };
    std::vector<Source> sources;
    for (Peer& p : peers_) {
      if (p.sched) sources.push_back({&*p.sched, &p, true});
      if (p.heartbeat) sources.push_back({&*p.heartbeat, &p, false});
      if (p.server) sources.push_back({&*p.server, &p, false});
    }
    for (zmq::socket_t& f : fillers_) sources.push_back({&f, nullptr, false});
    if (sources.empty()) {
      std::this_thread::sleep_for(wait);
      return;
    }
    if (wait.count() > 0) {
      std::vector<zmq::pollitem_t> items;
      for (const Source& s : sources) items.push_back({s.socket->handle(), 0, ZMQ_POLLIN, 0});
      try {
        zmq::poll(items.data(), items.size(), wait);
      } catch (const zmq::error_t& e) {
        // libFuzzer's alarm interrupts waits (EINTR): a drain cut short is a shorter drain.
        if (e.num() != EINTR) throw;
      }
    }
    std::vector<Peer*> renamed;
    for (const Source& s : sources) {
      for (int k = 0; k < 64; ++k) {
        std::optional<ZmqEnvelope> env;
        try {
          env = receive_message(*s.socket, false, milliseconds(0), DecodeLimits{});
        } catch (const ProtocolError& e) {
          fail_with_nodes(std::string("a node sent a peer a malformed message: ") + e.what());
        }
        if (!env) break;
        if (s.peer == nullptr || !s.scheduler || env->message.header.type != MsgType::kRegisterReply) continue;
        const std::string body = env->message.text_payload();
        const auto reply = wire_decode<RegisterReply>(std::as_bytes(std::span(body.data(), body.size())), "reply");
        // A peer may be given a server slot (no keys: documented), never worker 0's.
        if (reply.rank == 0 && reply.worker_tokens.empty()) fail_with_nodes("a peer was given worker rank 0");
        s.peer->rank = reply.rank;
        s.peer->worker = reply.worker_tokens.empty();
        if (s.peer->worker && reply.rank >= kWorkers) joined_.insert(reply.rank);
        s.peer->rank_here = true;
        s.peer->token = reply.token;
        renamed.push_back(s.peer);
      }
    }
    for (Peer* p : renamed) p->server.reset();  // reconnects under its token's name on its next request
  }

  WorkerFailurePolicy policy_;
  zmq::context_t ctx_;
  Logger log_;
  ShardMap map_;
  Scheduler scheduler_;
  Logger server_log_;
  Server server_;
  std::thread scheduler_thread_, server_thread_;
  std::exception_ptr scheduler_error_, server_error_;
  std::atomic<bool> scheduler_done_{false}, server_done_{false};
  std::atomic<bool> server_registered_{false};  // its register reply came (ServerOptions::on_registered)
  HonestWorker honest_{ctx_, *this};
  std::vector<zmq::socket_t> fillers_;
  Peer peers_[kPeers];
  bool legit_end_ = false;         // the job may have ended: a registered peer's abort, an excused abort
  bool peer_done_ = false;         // a peer said done in its own rank, on its own connection
  bool server_contested_ = false;  // a peer registered as a server (may have taken the slot)
  std::set<int> joined_;           // worker ranks of the vacant slots given to a peer (a --join)
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::Input in(data, size);
  const bool timing = std::getenv("PSTRAIN_FUZZ_TIMING") != nullptr;  // where an input's time goes
  const auto t0 = std::chrono::steady_clock::now();
  auto ms = [&t0] { return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(); };
  static constexpr WorkerFailurePolicy kPolicies[] = {WorkerFailurePolicy::kAbort, WorkerFailurePolicy::kContinue,
                                                      WorkerFailurePolicy::kRestart};
  const WorkerFailurePolicy policy = kPolicies[in.byte() % 3];
  {
    Harness harness(policy);
    if (timing) std::fprintf(stderr, "timing: started %.1f ms\n", ms());
    harness.run_ops(in);
    if (timing) std::fprintf(stderr, "timing: ops %.1f ms\n", ms());
    harness.check_and_end();
    if (timing) std::fprintf(stderr, "timing: checked and ended %.1f ms\n", ms());
  }
  if (timing) std::fprintf(stderr, "timing: torn down %.1f ms\n", ms());
  return 0;
}
