// The cluster_sequence harness's job, peers and raw sends (fuzz/cluster_sequence.cc):
// the constants of the job the harness runs, the layouts a peer may claim,
// and sending frames exactly as given (a header that need not match its payload).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/base/log.h"
#include "common/config/job_fingerprint.h"
#include "common/math/param_layout.h"
#include "common/transport/zmq/zmq_socket.h"
#include "common/wire/protocol.h"

namespace pstrain::fuzz_cluster {

using std::chrono::milliseconds;

inline constexpr int kPeers = 3;
inline constexpr int kWorkers = 2;
// The job is elastic (cluster.max_workers): one vacant worker slot, rank
// kWorkers, that a --join registration may take.
inline constexpr int kSlots = kWorkers + 1;
inline constexpr int kMaxOps = 48;
inline constexpr std::int64_t kPartitionBytes = 64;  // 16 floats per chunk
inline constexpr int kReplyBoundMs = 3000;           // a fresh request's answer
// Both nodes end after the honest abort. A server whose registration the
// scheduler never took (the job failed first: its thread started late)
// waits timeout_ms + its heartbeat_timeout_ms for an answer (4 s here).
inline constexpr int kEndBoundMs = 15000;
inline const char* const kScheduler = "inproc://fuzz-scheduler";
inline const char* const kServer = "inproc://fuzz-server";

// What a node thread ended with, for a finding's message.
inline std::string describe_end(const std::atomic<bool>& done, const std::exception_ptr& error) {
  if (!done.load()) return "running";
  if (!error) return "returned";
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return std::string("threw: ") + e.what();
  } catch (...) {
    return "threw a non-exception";
  }
}

// PSTRAIN_FUZZ_LOG=info|debug: the nodes' log lines (default: errors only).
inline LogLevel log_level() {
  const char* level = std::getenv("PSTRAIN_FUZZ_LOG");
  return level != nullptr ? parse_log_level(level) : LogLevel::kError;
}

// A node's thread: runs `body`, keeps what it threw, then says it is done.
inline void run_node(std::exception_ptr& error, std::atomic<bool>& done, const std::function<void()>& body) {
  try {
    body();
  } catch (...) {
    error = std::current_exception();
  }
  done.store(true);
}

inline Header header(MsgType type, Role role, int sender) {
  Header h;
  h.type = type;
  h.role = role;
  h.sender = sender;
  return h;
}

[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "cluster_sequence: invariant broken: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

inline ParamLayout job_layout() {
  ParamLayout l;
  l.add("w", {24});
  l.add("b", {8});
  return l;
}

inline ParamLayout other_layout() {
  ParamLayout l;
  l.add("w", {5, 5});
  return l;
}

inline std::string fingerprint() { return job_fingerprint(Mode::kSync, kPartitionBytes, 1, kWorkers); }

// The input's failure policy (its first byte): under "abort" nobody is
// declared dead within an input; under "continue" and "restart" a worker
// silent for kDropAfterMs is dropped (a peer that stops talking, a filler),
// so every barrier wait has an end the harness can bound.
inline constexpr int kDropAfterMs = 800;
inline constexpr int kHonestHeartbeatMs = 100;  // worker 0's, on its main connection

inline ClusterConfig cluster_config(WorkerFailurePolicy policy) {
  ClusterConfig c;
  c.num_servers = 1;
  c.num_workers = kWorkers;
  c.max_workers = kSlots;
  c.timeout_ms = 2000;  // registration wait, parked-pull / store-get expiry, a rejoin's window
  c.heartbeat_interval_ms = 100;
  c.heartbeat_timeout_ms = policy == WorkerFailurePolicy::kAbort ? 60000 : kDropAfterMs;
  c.on_worker_failure = policy;
  return c;
}

// "No honest worker waits past the job's timeout": once every other worker
// has said done, been dropped or failed, worker 0's barrier wait ends (a
// reply, or the job's abort naming why) within the silence that drops a
// worker plus the job's timeout_ms, with room for the sanitizers.
inline constexpr int kBarrierBoundMs = kDropAfterMs + 2000 + 3000;

inline SocketOptions peer_socket_options() {
  SocketOptions o;
  o.linger = milliseconds(0);
  o.send_timeout = milliseconds(100);
  return o;
}

// Sends a header and an optional payload frame exactly as given (header
// fields need not match the payload: that is the point).
inline void send_raw(zmq::socket_t& s, const Header& h, const std::optional<std::string>& payload) {
  zmq::message_t head = to_message(encode_header(h));
  if (!payload) {
    (void)s.send(head, zmq::send_flags::dontwait);
    return;
  }
  if (!s.send(head, zmq::send_flags::sndmore | zmq::send_flags::dontwait)) return;
  zmq::message_t body(payload->data(), payload->size());
  (void)s.send(body, zmq::send_flags::dontwait);
}

// A control message with a bytes body (text or an encoded struct), well formed.
inline void send_body(zmq::socket_t& s, Header h, const std::string& body) {
  h.dtype = DType::kBytes;
  h.num_elems = static_cast<std::int64_t>(body.size());
  send_raw(s, h, body);
}

inline std::string floats_bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

struct Peer {
  std::optional<zmq::socket_t> sched, heartbeat, server;
  bool registered_here = false;  // sent a register on `sched`
  int rank = -1;                 // from its register reply
  bool worker = false;           // that reply was a worker's (no worker tokens)
  bool rank_here = false;        // that reply came on the current `sched` (the connection the rank is bound to)
  std::string token;
  bool leave_after_send = false;
};

}  // namespace pstrain::fuzz_cluster
