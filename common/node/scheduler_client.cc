#include "common/node/scheduler_client.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "common/base/errors.h"
#include "common/wire/job_secret.h"
#include "common/wire/security.h"
#include "common/wire/wire_archive.h"

namespace pstrain {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

std::string this_host() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown-host";
  return name;
}

namespace {
EndpointOptions connection_options(const ClusterConfig& cluster, const SecurityContext* security,
                                   TrafficCounters* traffic) {
  EndpointOptions o;
  o.socket.security = security;
  o.socket.send_timeout = std::chrono::milliseconds(cluster.timeout_ms);
  o.traffic = traffic;
  return o;
}
}  // namespace

SchedulerClient::SchedulerClient(Transport& transport, std::string scheduler_endpoint, Role role,
                                 const ClusterConfig& cluster, TrafficCounters* traffic,
                                 const SecurityContext* security)
    : SchedulerClient(nullptr, &transport, std::move(scheduler_endpoint), role, cluster, traffic, security) {}

SchedulerClient::SchedulerClient(std::unique_ptr<Transport> transport, std::string scheduler_endpoint, Role role,
                                 const ClusterConfig& cluster, TrafficCounters* traffic,
                                 const SecurityContext* security)
    : SchedulerClient(std::move(transport), nullptr, std::move(scheduler_endpoint), role, cluster, traffic,
                      security) {}

SchedulerClient::SchedulerClient(std::unique_ptr<Transport> owned, Transport* transport,
                                 std::string scheduler_endpoint, Role role, const ClusterConfig& cluster,
                                 TrafficCounters* traffic, const SecurityContext* security)
    : owned_transport_(std::move(owned)), transport_(transport != nullptr ? *transport : *owned_transport_), endpoint_(std::move(scheduler_endpoint)),
      role_(role), cluster_(cluster), traffic_(traffic), security_(security),
      conn_(transport_.connect(endpoint_, connection_options(cluster, security, traffic))),
      pulse_(milliseconds(cluster.heartbeat_interval_ms)) {}

SchedulerClient::~SchedulerClient() { stop_heartbeats(); }

Header SchedulerClient::make_header(MsgType type) const {
  Header h;
  h.type = type;
  h.role = role_;
  h.sender = rank_;
  return h;
}

void ProcessPulse::beat(TimePoint now) {
  std::lock_guard lock(mu_);
  if (running_ && now - last_ > interval_ + kSlack) {
    pause_from_ = last_;
    pause_to_ = now;
  }
  running_ = true;
  last_ = now;
}

void ProcessPulse::stop() {
  std::lock_guard lock(mu_);
  running_ = false;
}

bool ProcessPulse::stalled(TimePoint from, TimePoint now) const {
  if (now <= from) return false;
  std::lock_guard lock(mu_);
  if (!running_) return false;
  // The pause still going (the heartbeat thread has not woken since), or the latest one that ended.
  const bool open = now - last_ > interval_ + kSlack;
  const TimePoint pause_from = open ? last_ : pause_from_;
  const TimePoint pause_to = open ? now : pause_to_;
  const auto overlap = std::min(pause_to, now) - std::max(pause_from, from);
  return overlap.count() > 0 && 2 * overlap >= now - from;
}

void SchedulerClient::check_scheduler_alive() const {
  if (rank_ < 0) return;  // before the rendezvous the register wait has its own limit
  const auto now = Clock::now();
  const auto previous = last_check_;
  last_check_ = now;
  // Idle callers (the servers' loop, the workers' waits) check at least every
  // 500 ms: a gap of twice that, and of the whole timeout, over half of which
  // the process was paused (its heartbeat thread did not run: not a long
  // compute, nor a caller blocked while the rest ran) is its own silence.
  const auto own_gap = std::max(milliseconds(cluster_.heartbeat_timeout_ms), milliseconds(1000));
  if (previous != Clock::time_point{} && now - previous > own_gap && pulse_.stalled(previous, now)) {
    last_heard_ = now;  // stopped or starved: its silence, not the scheduler's
    return;
  }
  const auto silent = std::chrono::duration_cast<milliseconds>(now - last_heard_).count();
  // The silence itself, over half of it a pause: a process stopped just after a check (the gap
  // between the two checks under the timeout, the silence past it) is as silent by its own doing.
  // Before, a worker stopped past the timeout and woken before its fence blamed the scheduler
  // (tests/integration/sweep_faults_test.cc, stop-sync-4w-continue).
  if (silent > cluster_.heartbeat_timeout_ms && pulse_.stalled(last_heard_, now)) {
    last_heard_ = now;
    return;
  }
  if (silent > cluster_.heartbeat_timeout_ms) {
    throw TransportError("the scheduler at " + endpoint_ + " sent nothing for " + std::to_string(silent) +
                         " ms (cluster.heartbeat_timeout_ms = " + std::to_string(cluster_.heartbeat_timeout_ms) +
                         "): it is gone, so is the job");
  }
}

void SchedulerClient::note_server_news(const Message& m) {
  const int server = static_cast<int>(m.header.key);
  if (m.header.type == MsgType::kServerRestarting) {
    restarting_servers_.insert(server);
    ++server_failures_;
    return;
  }
  restarting_servers_.erase(server);
  servers_back_.emplace_back(server, m.text_payload());
}

bool SchedulerClient::handle_incoming() {
  auto env = conn_->receive(milliseconds(0));
  if (!env) return shutdown_;
  last_heard_ = Clock::now();
  const Message& m = env->message;
  switch (m.header.type) {
    case MsgType::kHeartbeat:
      return shutdown_;
    case MsgType::kShutdown:
      shutdown_ = true;
      return true;
    case MsgType::kAbort:
      throw AbortedError("job aborted by the scheduler: " + m.text_payload());
    case MsgType::kError:
      throw SchedulerRefusal(m.header.status, "scheduler refused a request: " + m.text_payload());
    case MsgType::kDropped:
      (m.header.aux == kDroppedRetired ? retired_ : dropped_).push_back(static_cast<int>(m.header.key));
      return shutdown_;
    case MsgType::kServerRestarting:
    case MsgType::kServerBack:
      note_server_news(m);
      return shutdown_;
    case MsgType::kRejoined:
      rejoined_.push_back(Rejoined{static_cast<int>(m.header.key), m.text_payload(), m.header.step});
      return shutdown_;
    case MsgType::kMembershipChange:
      membership_changes_.push_back(m.header.key);
      call_on_news();  // answering_news: read by another wait (a KV client's)
      return shutdown_;
    case MsgType::kWorkerJoining:
      joining_.push_back(Joining{static_cast<int>(m.header.key), m.text_payload(), m.header.step, m.header.aux});
      return shutdown_;
    default:
      throw ProtocolError("unexpected " + std::string(to_string(m.header.type)) + " from the scheduler");
  }
}

bool SchedulerClient::drain_incoming(int max_messages) {
  for (int n = 0; n < max_messages; ++n) {
    if (handle_incoming()) return true;  // an abort throws AbortedError itself
  }
  return shutdown_;
}

Message SchedulerClient::wait_for(MsgType type, const std::string& what, int extra_ms, bool while_alive) {
  const int limit_ms = cluster_.timeout_ms + extra_ms;
  // An answer while_alive may take as long as the slowest worker: no fixed limit, so no clock read
  // for one (a barrier's wait, once per worker per barrier, reads the clock only when the answer comes).
  const auto deadline = while_alive ? Clock::time_point{} : Clock::now() + milliseconds(limit_ms);
  while (true) {
    if (type == MsgType::kBarrierReply && barrier_reply_) {  // it came during a store request of on_news
      Message m = std::move(*barrier_reply_);
      barrier_reply_.reset();
      return m;
    }
    auto left = milliseconds(200);
    if (!while_alive) left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    if (!while_alive && left.count() <= 0) {
      throw TimeoutError(what + ": no answer from the scheduler at " + endpoint_ + " within " +
                         std::to_string(limit_ms) + " ms");
    }
    auto env = conn_->receive(std::min(left, milliseconds(200)));
    if (!env) {
      check_scheduler_alive();  // nothing queued: silent since the last message (a dead scheduler answers nothing)
      if (watch_ != nullptr) (*watch_)();
      continue;
    }
    last_heard_ = Clock::now();
    Message& m = env->message;
    if ((m.header.type == MsgType::kStoreReply || m.header.type == MsgType::kError) &&
        abandoned_.erase(m.header.request_id) > 0) {
      continue;  // the late answer to a get its watch ended
    }
    if (m.header.type == type) return std::move(m);
    if (m.header.type == MsgType::kHeartbeat) continue;
    if (m.header.type == MsgType::kBarrierReply && barrier_waiting_ && m.header.key == *barrier_waiting_) {
      barrier_reply_ = std::move(m);  // for the barrier's own wait, once this request is answered
      continue;
    }
    if (m.header.type == MsgType::kDropped) {  // news for the caller, not an answer
      dropped_.push_back(static_cast<int>(m.header.key));
      if (watch_ != nullptr) (*watch_)();
      continue;
    }
    if (m.header.type == MsgType::kServerRestarting || m.header.type == MsgType::kServerBack) {
      note_server_news(m);
      continue;
    }
    if (m.header.type == MsgType::kRejoined) {
      rejoined_.push_back(Rejoined{static_cast<int>(m.header.key), m.text_payload(), m.header.step});
      continue;
    }
    if (m.header.type == MsgType::kMembershipChange) {
      membership_changes_.push_back(m.header.key);
      call_on_news();
      continue;
    }
    if (m.header.type == MsgType::kWorkerJoining) {
      joining_.push_back(Joining{static_cast<int>(m.header.key), m.text_payload(), m.header.step, m.header.aux});
      continue;
    }
    if (m.header.type == MsgType::kAbort) throw AbortedError("job aborted by the scheduler: " + m.text_payload());
    if (m.header.type == MsgType::kError) {
      throw SchedulerRefusal(m.header.status, what + ": scheduler answered: " + m.text_payload());
    }
    if (m.header.type == MsgType::kShutdown) {
      shutdown_ = true;
      throw AbortedError(what + ": the scheduler shut the job down");
    }
    throw ProtocolError(what + ": unexpected " + std::string(to_string(m.header.type)) + " from the scheduler");
  }
}

void SchedulerClient::answer_challenge_for(RegisterRequest& request) {
  request.challenge.clear();
  request.proof.clear();
  if (security_ == nullptr || security_->curve || security_->job_secret.empty()) return;
  // Security mode "off": the scheduler's nonce, answered with the job secret (common/wire/job_secret.h).
  Header h = make_header(MsgType::kChallenge);
  h.request_id = next_request_id_++;
  conn_->send(h);
  const Message m = wait_for(MsgType::kChallenge, "the challenge to this " + std::string(to_string(role_)) +
                             "'s registration");
  request.challenge = m.text_payload();
  request.proof = answer_challenge(security_->job_secret, request.challenge, wire_encode(request));
}

RegisterReply SchedulerClient::register_node(RegisterRequest request) {
  return register_as(std::move(request), kRegisterFirst);
}

RegisterReply SchedulerClient::rejoin_node(RegisterRequest request) {
  return register_as(std::move(request), kRegisterRejoin);
}

RegisterReply SchedulerClient::join_node(RegisterRequest request) {
  return register_as(std::move(request), kRegisterJoin);
}

RegisterReply SchedulerClient::register_as(RegisterRequest request, std::int64_t kind) {
  request.role = role_;
  answer_challenge_for(request);
  Header h = make_header(MsgType::kRegister);
  h.request_id = next_request_id_++;
  h.aux = kind;
  conn_->send(h, Payload::bytes(wire_encode(request)));
  // Waits longer than the scheduler's own registration timeout, so that when
  // some node is missing, the scheduler's reason (who is missing) arrives first.
  Message m = wait_for(MsgType::kRegisterReply, "registration of this " + std::string(to_string(role_)),
                       std::max(1000, cluster_.heartbeat_timeout_ms));
  const std::string body = m.text_payload();
  auto reply = wire_decode<RegisterReply>(std::as_bytes(std::span(body.data(), body.size())), "register reply");
  reply.layout.validate();
  rank_ = reply.rank;
  token_ = reply.token;
  if (kind == kRegisterRejoin) {
    barrier_seq_ = m.header.key;  // the others' next barrier
    rejoin_take_ = m.header.step;
    released_checkpoint_ = m.header.aux;
    retired_by_change_ = reply.retired_by_change;
    if (retired_by_change_ != 0) return reply;  // not taken back: no member, no heartbeats
  }
  last_heard_ = Clock::now();
  pulse_.beat(last_heard_);  // the heartbeat thread's start: a process stopped before its first wake-up is paused too
  hb_thread_ = std::thread([this] { heartbeat_loop(endpoint_); });
  return reply;
}

void SchedulerClient::barrier(const std::string& name) {
  Header h = make_header(MsgType::kBarrier);
  h.key = barrier_seq_++;
  conn_->send(h, Payload::bytes(name));
  Message m = wait_for(MsgType::kBarrierReply, "barrier '" + name + "'", 0, true);
  if (m.header.key != h.key) {
    throw ProtocolError("barrier '" + name + "': reply for barrier " + std::to_string(m.header.key) + ", expected " +
                        std::to_string(h.key));
  }
}

void SchedulerClient::call_on_news() {
  if (on_news_ == nullptr) return;
  const std::function<void()>* news = std::exchange(on_news_, nullptr);  // not re-entered by its own requests
  try {
    (*news)();
  } catch (...) {
    on_news_ = news;
    throw;
  }
  on_news_ = news;
}

void SchedulerClient::answering_news(const std::function<void()>& on_news, const std::function<void()>& wait) {
  try {
    if (!membership_changes_.empty()) on_news();  // heard before: answered now, as it may be awaited
    on_news_ = &on_news;
    wait();
  } catch (...) {
    on_news_ = nullptr;
    throw;
  }
  on_news_ = nullptr;
}

void SchedulerClient::barrier(const std::string& name, const std::function<void()>& on_news) {
  barrier_waiting_ = barrier_seq_;  // the number barrier() sends
  barrier_reply_.reset();
  try {
    if (!membership_changes_.empty()) on_news();  // heard before: answered now, as it may be awaited
    on_news_ = &on_news;
    barrier(name);
  } catch (...) {
    on_news_ = nullptr;
    barrier_waiting_.reset();
    throw;
  }
  on_news_ = nullptr;
  barrier_waiting_.reset();
}

StoreEntry SchedulerClient::store_request(MsgType type, const StoreEntry& entry, int timeout_ms,
                                          const std::string& what) {
  validate_store_entry(entry, what);
  Header h = make_header(type);
  h.request_id = next_request_id_++;
  h.aux = timeout_ms;
  conn_->send(h, Payload::bytes(wire_encode(entry)));
  // The scheduler answers a get that timed out itself: wait a little longer for its reason.
  Message m = wait_for(MsgType::kStoreReply, what, timeout_ms + 1000 - cluster_.timeout_ms);
  const std::string body = m.text_payload();
  StoreEntry reply = wire_decode<StoreEntry>(std::as_bytes(std::span(body.data(), body.size())), "store reply");
  if (m.header.request_id != h.request_id || reply.key != entry.key) {
    throw ProtocolError(what + ": reply for request " + std::to_string(m.header.request_id) + " (key '" + reply.key +
                        "'), expected request " + std::to_string(h.request_id));
  }
  return reply;
}

void SchedulerClient::store_set(const std::string& key, const std::string& value) {
  store_request(MsgType::kStoreSet, StoreEntry{key, value}, cluster_.timeout_ms, "store set of key '" + key + "'");
}

std::string SchedulerClient::store_get(const std::string& key, int timeout_ms) {
  if (timeout_ms < 1) {
    throw ConfigError("store get of key '" + key + "': timeout_ms must be >= 1, got " + std::to_string(timeout_ms));
  }
  const int limit_ms = std::min(timeout_ms, cluster_.timeout_ms);  // the scheduler's own limit too
  return store_request(MsgType::kStoreGet, StoreEntry{key, {}}, limit_ms, "store get of key '" + key + "'").value;
}

std::string SchedulerClient::store_get(const std::string& key, int timeout_ms, const std::function<void()>& watch) {
  watch();
  const std::uint64_t request = next_request_id_;  // the one store_request sends
  bool stopped = false;
  const std::function<void()> watched = [&] {
    try {
      watch();
    } catch (...) {
      stopped = true;
      throw;
    }
  };
  watch_ = &watched;
  try {
    std::string value = store_get(key, timeout_ms);
    watch_ = nullptr;
    return value;
  } catch (...) {
    watch_ = nullptr;
    if (stopped) abandoned_.insert(request);
    throw;
  }
}

void SchedulerClient::finish(bool retired) {
  Header h = make_header(MsgType::kDone);
  h.aux = retired ? kDoneRetired : kDoneFinished;
  conn_->send(h);
  if (!shutdown_) wait_for(MsgType::kShutdown, "end of job", 0, true);
  shutdown_ = true;
  stop_heartbeats();
}

void SchedulerClient::report_failure(const std::string& reason) noexcept {
  try {
    stop_heartbeats();
    conn_->send(make_header(MsgType::kAbort), Payload::bytes(reason));
  } catch (...) {
    // Best effort: the scheduler also notices the missing heartbeats.
  }
}

void SchedulerClient::heartbeat_loop(std::string endpoint) {
  try {
    EndpointOptions options;
    options.socket = SocketOptions{std::int64_t{1} << 20, milliseconds(0), security_};
    options.socket.send_timeout = milliseconds(0);  // a beat that finds the queue full is skipped, never waited for
    options.traffic = traffic_;
    // The scheduler takes heartbeats for this node's rank only from here.
    options.identity = "h" + token_;
    std::unique_ptr<Connection> hb = transport_.connect(endpoint, options);
    std::unique_lock lock(hb_mutex_);
    while (!hb_stop_) {
      lock.unlock();
      pulse_.beat(Clock::now());
      try {
        hb->send(make_header(MsgType::kHeartbeat));
      } catch (const TransportError&) {
        // The queue is full (the scheduler is not reading): skip this beat.
      }
      lock.lock();
      hb_cv_.wait_for(lock, milliseconds(cluster_.heartbeat_interval_ms), [this] { return hb_stop_; });
    }
  } catch (const std::exception&) {
    // The context is closing or the socket failed: the scheduler will see the silence.
  }
  pulse_.stop();
}

void SchedulerClient::stop_heartbeats() {
  {
    std::lock_guard lock(hb_mutex_);
    hb_stop_ = true;
  }
  hb_cv_.notify_all();
  if (hb_thread_.joinable()) hb_thread_.join();
}

}  // namespace pstrain
