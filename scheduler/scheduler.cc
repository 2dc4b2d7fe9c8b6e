#include "scheduler/scheduler.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <set>

#include "common/base/errors.h"
#include "common/base/json_line.h"
#include "common/transport/transport.h"
#include "common/wire/wire_archive.h"

namespace pstrain {

using std::chrono::milliseconds;

namespace {
EndpointOptions scheduler_endpoint_options(const SchedulerOptions& options) {
  EndpointOptions o;
  o.socket = SocketOptions{std::int64_t{16} << 20, milliseconds(2000), options.security};
  o.limits = DecodeLimits{std::int64_t{16} << 20};
  o.traffic = options.traffic;
  return o;
}
}  // namespace

Scheduler::Scheduler(Transport& transport, SchedulerOptions options, Logger& log)
    : Scheduler(nullptr, &transport, std::move(options), log) {}

Scheduler::Scheduler(std::unique_ptr<Transport> transport, SchedulerOptions options, Logger& log)
    : Scheduler(std::move(transport), nullptr, std::move(options), log) {}

Scheduler::Scheduler(std::unique_ptr<Transport> owned, Transport* transport, SchedulerOptions options, Logger& log)
    : owned_transport_(std::move(owned)), transport_(transport != nullptr ? *transport : *owned_transport_),
      options_(std::move(options)), log_(log),
      zap_(transport_.authenticate(options_.security, log)),
      router_(transport_.listen(options_.bind_endpoint, scheduler_endpoint_options(options_))),
      warnings_(log) {
  if (options_.num_servers < 0 || options_.num_workers < 1) {
    throw ConfigError("scheduler: need at least 1 worker and 0 or more servers, got " +
                      std::to_string(options_.num_workers) + " workers and " + std::to_string(options_.num_servers) +
                      " servers");
  }
  endpoint_ = router_->address();
}

void Scheduler::refuse(const PeerId& from, const Header& request, const std::string& why) {
  warnings_.warn(from.name(), why);
  Header reply;
  reply.type = MsgType::kError;
  reply.role = Role::kScheduler;
  reply.sender = 0;
  reply.status = Status::kBadRequest;
  reply.request_id = request.request_id;
  reply.key = request.key;
  reply.step = request.step;
  send_quietly(from, reply, Payload::bytes(why.substr(0, kMaxBodyBytes)));
}

void Scheduler::send_quietly(const PeerId& to, const Header& header, Payload payload) {
  try {
    router_->send(to, header, std::move(payload));
  } catch (const TransportError& e) {
    // The peer has gone (ROUTER_MANDATORY: EHOSTUNREACH): nobody to answer.
    if (unreachable_replies_++ == 0) log_.info(std::string("a reply found its peer gone: ") + e.what());
  }
}

void Scheduler::run() {
  log_.info("listening on " + endpoint_ + " for " + std::to_string(options_.num_servers) + " servers and " +
            std::to_string(options_.num_workers) + " workers");
  {
    TraceSpan span(options_.trace, TraceLevel::kSteps, "registration", "scheduler");
    registration();
    assign_ranks();
  }
  TraceSpan span(options_.trace, TraceLevel::kSteps, "job", "scheduler");
  serve_until_done();
  span.end();
  broadcast(MsgType::kShutdown, "");
  log_.info("all workers done; job finished");
}

void Scheduler::registration() {
  const auto deadline = Clock::now() + milliseconds(options_.cluster.timeout_ms);
  const auto expected = static_cast<std::size_t>(options_.num_servers + options_.num_workers);
  while (nodes_.size() < expected) {
    if (Clock::now() > deadline) {
      fail("registration: waited " + std::to_string(options_.cluster.timeout_ms) + " ms; " + roster());
    }
    PeerId from;
    try {
      auto env = router_->receive(milliseconds(200), &from);
      if (env) {
        sender_key_ = env->user_id;
        handle(env->from, env->message, true);
      }
    } catch (const ProtocolError& e) {
      refuse(from, Header{}, std::string("malformed message during registration: ") + e.what());
    }
  }
}

std::string Scheduler::roster() const {
  int servers = 0, workers = 0;
  for (const Node& n : nodes_) (n.role == Role::kServer ? servers : workers)++;
  return "registered " + std::to_string(servers) + "/" + std::to_string(options_.num_servers) + " servers and " +
         std::to_string(workers) + "/" + std::to_string(options_.num_workers) + " workers";
}

void Scheduler::on_register(const PeerId& from, const Message& msg) {
  const std::string body = msg.text_payload();
  RegisterRequest req = wire_decode<RegisterRequest>(std::as_bytes(std::span(body.data(), body.size())), "register body");
  if (req.role == Role::kScheduler || req.role != msg.header.role) {
    throw ProtocolError("register: role " + std::string(to_string(req.role)) + " cannot register");
  }
  if (options_.security != nullptr && options_.security->curve) {
    // CURVE: the role is bound to the key (the ZAP handler's user id): a
    // worker's key cannot take a server's slot, nor a server's a worker's.
    const char* key_role = key_of(msg);
    const std::optional<KeyOwner> owner = key_owner(key_role == nullptr ? "" : key_role);
    if (!owner || owner->role != req.role) {
      throw ProtocolError("register: a " + std::string(key_role == nullptr ? "unknown" : key_role) +
                          " key cannot register as a " + std::string(to_string(req.role)));
    }
    bind_rank_to_key(*owner, key_role, req);
  }
  const int limit = req.role == Role::kServer ? options_.num_servers : options_.num_workers;
  int count = 0;
  for (const Node& n : nodes_) count += n.role == req.role ? 1 : 0;
  if (count >= limit) {
    throw ProtocolError("register: the job already has its " + std::to_string(limit) + " " +
                        std::string(to_string(req.role)) + "s (a " + std::string(to_string(req.role)) + " from " +
                        req.host + " pid " + std::to_string(req.pid) + " is one too many)");
  }
  if (req.requested_rank >= limit) {
    throw ProtocolError("register: requested " + std::string(to_string(req.role)) + " rank " +
                        std::to_string(req.requested_rank) + " is outside [0, " + std::to_string(limit) + ")");
  }
  for (const Node& n : nodes_) {
    if (!n.request.job_fingerprint.empty() && n.request.job_fingerprint != req.job_fingerprint) {
      throw ProtocolError("register: refused a " + std::string(to_string(req.role)) + " from " + req.host + " (pid " +
                          std::to_string(req.pid) + "): it runs a different job: '" + req.job_fingerprint +
                          "' vs '" + n.request.job_fingerprint + "' (are all nodes using the same config?)");
    }
    if (n.role == req.role && req.requested_rank >= 0 && n.request.requested_rank == req.requested_rank) {
      throw ProtocolError("register: " + std::string(to_string(req.role)) + " rank " +
                          std::to_string(req.requested_rank) + " requested twice");
    }
  }
  if (req.role == Role::kWorker) {
    req.layout.validate();
    refuse_other_layout(req);
  }
  Node node;
  node.role = req.role;
  node.routing_id = from;
  node.request = std::move(req);
  node.last_seen = Clock::now();
  nodes_.push_back(std::move(node));
  log_.info("registered " + std::string(to_string(nodes_.back().role)) + " from " + nodes_.back().request.host +
            " (pid " + std::to_string(nodes_.back().request.pid) + "); " + roster());
}

void Scheduler::refuse_other_layout(const RegisterRequest& req) const {
  for (const Node& n : nodes_) {
    if (n.role != Role::kWorker) continue;
    const auto& a = n.request.layout.tensors();
    const auto& b = req.layout.tensors();
    const bool same = a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](const TensorSpec& x, const TensorSpec& y) {
                        return x.name == y.name && x.shape == y.shape;
                      });
    if (!same) {
      throw ProtocolError("register: refused a worker from " + req.host + " (pid " + std::to_string(req.pid) +
                          "): it has a different model layout (" + std::to_string(b.size()) + " tensors, " +
                          std::to_string(req.layout.total_elems()) + " parameters) from the workers registered (" +
                          std::to_string(a.size()) + " tensors, " + std::to_string(n.request.layout.total_elems()) +
                          " parameters)");
    }
    return;  // every registered worker has the first one's layout
  }
}

void Scheduler::assign_ranks() {
  for (Role role : {Role::kServer, Role::kWorker}) {
    std::set<int> taken;
    for (Node& n : nodes_) {
      if (n.role == role && n.request.requested_rank >= 0) {
        n.rank = n.request.requested_rank;
        taken.insert(n.rank);
      }
    }
    int next = 0;
    for (Node& n : nodes_) {
      if (n.role != role || n.rank >= 0) continue;
      while (taken.count(next)) ++next;
      n.rank = next;
      taken.insert(next);
    }
  }
  // Every worker must describe the same model.
  const Node* first_worker = nullptr;
  for (const Node& n : nodes_) {
    if (n.role != Role::kWorker) continue;
    if (first_worker == nullptr) {
      first_worker = &n;
      continue;
    }
    const auto& a = first_worker->request.layout.tensors();
    const auto& b = n.request.layout.tensors();
    const bool same = a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](const TensorSpec& x, const TensorSpec& y) {
                        return x.name == y.name && x.shape == y.shape;
                      });
    if (!same) {
      auto describe = [](const ParamLayout& l) {
        return std::to_string(l.tensors().size()) + " tensors, " + std::to_string(l.total_elems()) + " parameters";
      };
      fail("worker " + std::to_string(n.rank) + " has a different model layout (" + describe(n.request.layout) +
           ") from worker " + std::to_string(first_worker->rank) + " (" + describe(first_worker->request.layout) + ")");
    }
  }
  RegisterReply reply;
  reply.num_servers = options_.num_servers;
  reply.num_workers = options_.num_workers;
  reply.server_endpoints.resize(static_cast<std::size_t>(options_.num_servers));
  for (const Node& n : nodes_) {
    if (n.role == Role::kServer) reply.server_endpoints[static_cast<std::size_t>(n.rank)] = n.request.endpoint;
  }
  if (first_worker != nullptr) reply.layout = first_worker->request.layout;
  std::random_device entropy;
  std::vector<std::string> worker_tokens(static_cast<std::size_t>(options_.num_workers));
  for (Node& n : nodes_) {
    static constexpr char kHex[] = "0123456789abcdef";
    n.token.clear();
    for (int i = 0; i < 8; ++i) {
      const unsigned v = entropy();
      for (int k = 0; k < 4; ++k) n.token += kHex[(v >> (4 * k)) & 15u];
    }
    if (n.role == Role::kWorker) worker_tokens[static_cast<std::size_t>(n.rank)] = n.token;
  }
  for (Node& n : nodes_) {
    reply.rank = n.rank;
    reply.token = n.token;
    reply.worker_tokens = n.role == Role::kServer ? worker_tokens : std::vector<std::string>{};
    Header h;
    h.type = MsgType::kRegisterReply;
    h.role = Role::kScheduler;
    h.sender = 0;
    // A node that registered and left before the rendezvous is not here to
    // read it: counted and dropped (it then misses its heartbeats).
    send_quietly(n.routing_id, h, Payload::bytes(wire_encode(reply)));
    n.last_seen = Clock::now();
  }
  log_.info("rendezvous complete: " + std::to_string(reply.layout.tensors().size()) + " tensors, " +
            std::to_string(reply.layout.total_elems()) + " parameters");
}

void Scheduler::bind_rank_to_key(const KeyOwner& owner, const std::string& key_name, RegisterRequest& req) {
  if (owner.rank < 0) return;  // a key shared by the role: any free rank
  if (req.requested_rank >= 0 && req.requested_rank != owner.rank) {
    throw ProtocolError("register: a " + key_name + " key cannot register as " + std::string(to_string(req.role)) +
                        " rank " + std::to_string(req.requested_rank) + ": refused");
  }
  req.requested_rank = owner.rank;  // a per-worker key registers its own rank only
}

Scheduler::Node* Scheduler::find(Role role, int rank) {
  for (Node& n : nodes_) {
    if (n.role == role && n.rank == rank) return &n;
  }
  return nullptr;
}

void Scheduler::serve_until_done() {
  auto workers_done = [&] {
    return std::all_of(nodes_.begin(), nodes_.end(), [&](const Node& n) {
      return n.role != Role::kWorker || n.done || (n.dropped && !may_rejoin(n));
    });
  };
  while (!workers_done()) {
    PeerId from;
    try {
      auto env = router_->receive(milliseconds(std::min(200, options_.cluster.heartbeat_interval_ms)), &from);
      if (env) {
        sender_key_ = env->user_id;
        handle(env->from, env->message, false);
      }
    } catch (const ProtocolError& e) {
      refuse(from, Header{}, std::string("malformed message: ") + e.what());
    }
    expire_store_gets();
    check_liveness();
    send_heartbeats();
  }
}

void Scheduler::handle(const PeerId& from, const Message& msg, bool registering) {
  const Header& h = msg.header;
  if (h.type == MsgType::kRegister) {
    if (!registering && h.role == Role::kServer) {
      try {
        on_server_rejoin(from, msg);
      } catch (const ProtocolError& e) {
        refuse(from, h, e.what());
      }
      return;
    }
    if (!registering && h.aux != kRegisterRejoin) {
      throw ProtocolError("register after the rendezvous: the job is already running");
    }
    try {
      if (!registering) {
        on_rejoin(from, msg);
        return;
      }
      if (h.aux == kRegisterRejoin) throw ProtocolError("rejoin before the rendezvous completed: nothing to rejoin");
      on_register(from, msg);
    } catch (const ProtocolError& e) {
      refuse(from, h, e.what());
    }
    return;
  }
  if (registering) {
    if (h.type == MsgType::kAbort) {
      // Only a node that registered on this connection can fail the job now.
      for (const Node& n : nodes_) {
        if (n.routing_id == from) {
          fail("a " + std::string(to_string(n.role)) + " (" + n.request.host + ", pid " +
               std::to_string(n.request.pid) + ") failed during registration: " + msg.text_payload());
        }
      }
      throw ProtocolError("abort from a connection that has not registered: refused");
    }
    throw ProtocolError(std::string(to_string(h.type)) + " before the rendezvous completed");
  }
  Node* node = find(h.role, h.sender);
  if (node == nullptr) {
    throw ProtocolError(std::string(to_string(h.type)) + " from unknown " + std::string(to_string(h.role)) + " " +
                        std::to_string(h.sender));
  }
  const bool heartbeat_connection = h.type == MsgType::kHeartbeat && from.bytes() == "h" + node->token;
  if (!heartbeat_connection && node->routing_id != from) {
    throw ProtocolError(std::string(to_string(h.type)) + " claiming to be " + std::string(to_string(h.role)) + " " +
                        std::to_string(h.sender) + " from a connection that is not the one it registered on: refused");
  }
  if (node->dropped) {
    // It was dropped while silent (e.g. stopped) and speaks again: tell it
    // once, on its main connection (the heartbeat connection reads nothing).
    if (!node->told_dropped) {
      node->told_dropped = true;
      Header r;
      r.type = MsgType::kAbort;
      r.role = Role::kScheduler;
      r.sender = 0;
      log_.info("worker " + std::to_string(node->rank) + " speaks again after it was dropped: told to exit");
      send_quietly(node->routing_id, r,
                   Payload::bytes("worker " + std::to_string(node->rank) +
                                  " was dropped from the job (cluster.on_worker_failure = \"" +
                                  options_.cluster.on_worker_failure + "\"); the others went on without it: exit"));
    }
    return;
  }
  node->last_seen = Clock::now();
  switch (h.type) {
    case MsgType::kHeartbeat: return;
    case MsgType::kBarrier: on_barrier(msg); return;
    case MsgType::kStoreSet:
    case MsgType::kStoreGet: on_store(from, msg); return;
    case MsgType::kDone:
      node->done = true;
      log_.info("worker " + std::to_string(node->rank) + " done");
      return;
    case MsgType::kAbort:
      if (node->role == Role::kWorker) {
        worker_failed(*node, "worker " + std::to_string(node->rank) + " failed: " + msg.text_payload());
        return;
      }
      if (node->role == Role::kServer) {
        server_failed(*node, "server " + std::to_string(node->rank) + " failed: " + msg.text_payload());
        return;
      }
      fail(std::string(to_string(node->role)) + " " + std::to_string(node->rank) + " failed: " + msg.text_payload());
    default:
      throw ProtocolError("unexpected " + std::string(to_string(h.type)) + " at the scheduler");
  }
}

void Scheduler::on_barrier(const Message& msg) {
  const Header& h = msg.header;
  if (h.role != Role::kWorker) throw ProtocolError("barrier from a " + std::string(to_string(h.role)) + ": only workers take barriers");
  const std::string name = msg.has_payload ? msg.text_payload() : std::string();
  Node* node = find(Role::kWorker, h.sender);
  if (node != nullptr && node->realign) {
    // A rejoined worker's first barrier. Its numbers start at the others'
    // next; when it passes a checkpoint the others have already finished
    // (it joined at that very step: ps_rejoin.h), that one is answered at
    // once and its later numbers are one ahead of the others'.
    node->realign = false;
    if (!name.empty() && name == last_released_barrier_ && barriers_.count(h.key) == 0) {
      node->barrier_shift -= 1;
      Header r;
      r.type = MsgType::kBarrierReply;
      r.role = Role::kScheduler;
      r.sender = 0;
      r.key = h.key;
      send_quietly(node->routing_id, r);
      log_.info("worker " + std::to_string(h.sender) + " passed barrier '" + name +
                "', which the others had finished before it rejoined");
      return;
    }
  }
  const std::int64_t seq = h.key + (node != nullptr ? node->barrier_shift : 0);
  auto& arrived = barriers_[seq];
  barrier_names_.try_emplace(seq, name);
  if (std::find(arrived.begin(), arrived.end(), h.sender) != arrived.end()) {
    throw ProtocolError("worker " + std::to_string(h.sender) + " entered barrier " + std::to_string(seq) + " twice");
  }
  arrived.push_back(h.sender);
  release_barriers();
}

int Scheduler::live_workers() const {
  int live = 0;
  for (const Node& n : nodes_) live += n.role == Role::kWorker && !n.dropped ? 1 : 0;
  return live;
}

// A barrier completes when every worker still in the job has arrived.
void Scheduler::release_barriers() {
  for (auto it = barriers_.begin(); it != barriers_.end();) {
    int arrived_live = 0;
    for (int rank : it->second) {
      const Node* n = find(Role::kWorker, rank);
      arrived_live += n != nullptr && !n->dropped ? 1 : 0;
    }
    int members = 0;  // a worker that is done has passed every barrier (a rejoiner may come after it)
    for (const Node& n : nodes_) members += n.role == Role::kWorker && !n.dropped && !n.done ? 1 : 0;
    if (arrived_live < members) {
      ++it;
      continue;
    }
    Header r;
    r.type = MsgType::kBarrierReply;
    r.role = Role::kScheduler;
    r.sender = 0;
    for (Node& n : nodes_) {
      r.key = it->first - n.barrier_shift;  // in the worker's own numbering
      if (n.role == Role::kWorker && !n.dropped && !n.done) send_quietly(n.routing_id, r);  // done: waits for shutdown
    }
    next_barrier_seq_ = std::max(next_barrier_seq_, it->first + 1);
    last_released_barrier_ = barrier_names_[it->first];
    barrier_names_.erase(it->first);
    it = barriers_.erase(it);
  }
}

void Scheduler::worker_failed(Node& node, const std::string& reason, bool silent) {
  const std::string& policy = options_.cluster.on_worker_failure;
  if (policy != "continue" && policy != "restart") fail(reason);
  node.dropped = true;
  node.dropped_at = Clock::now();
  if (live_workers() == 0 && policy != "restart") fail(reason + "; no worker is left");
  report_failure(node, reason, silent, policy);
  log_.warn(reason + ": dropped from the job (cluster.on_worker_failure = \"" + policy + "\"); " +
            std::to_string(live_workers()) + " workers go on" +
            (policy == "restart" ? " until a new process takes its rank back" : ""));
  Header h;
  h.type = MsgType::kDropped;
  h.role = Role::kScheduler;
  h.sender = 0;
  h.key = node.rank;
  for (Node& n : nodes_) {
    if (&n == &node || n.dropped || n.done) continue;
    send_quietly(n.routing_id, h, Payload::bytes(reason));
  }
  release_barriers();
}

bool Scheduler::may_rejoin(const Node& n) const {
  // Allreduce workers (their fingerprint names the collective) do not rejoin yet.
  return options_.cluster.on_worker_failure == "restart" && n.rejoins < options_.cluster.max_restarts &&
         n.request.job_fingerprint.find(" collective=") == std::string::npos &&
         Clock::now() - n.dropped_at < milliseconds(options_.cluster.timeout_ms);
}

std::string Scheduler::live_worker_ranks() const {
  std::vector<int> ranks;
  for (const Node& n : nodes_) {
    if (n.role == Role::kWorker && !n.dropped) ranks.push_back(n.rank);
  }
  std::sort(ranks.begin(), ranks.end());
  std::string live;
  for (const int r : ranks) {
    if (!live.empty()) live += ',';
    live += std::to_string(r);
  }
  return live;
}

void Scheduler::on_store(const PeerId& from, const Message& msg) {
  const Header& h = msg.header;
  const bool is_set = h.type == MsgType::kStoreSet;
  try {
    const std::string body = msg.text_payload();
    StoreEntry entry = wire_decode<StoreEntry>(std::as_bytes(std::span(body.data(), body.size())), "store body");
    validate_store_entry(entry, is_set ? "store set" : "store get");
    if (!is_set) {
      if (entry.key == kLiveWorkersKey) {  // the live set now, every time (not stored)
        reply_store(from, h, StoreEntry{entry.key, live_worker_ranks()});
        return;
      }
      auto it = store_.find(entry.key);
      if (it == store_.end() && entry.key.starts_with(kEpochMembersPrefix)) {  // answered even when the store is full
        // The first ask for an epoch's workers fixes them: the live ones now
        // (worker/train/epoch_members.h). Every later ask gets the same answer.
        const std::string live = live_worker_ranks();
        log_.info("epoch " + entry.key.substr(kEpochMembersPrefix.size()) + " is shared by workers " + live);
        it = store_.emplace(entry.key, live).first;
      }
      if (it != store_.end()) {
        reply_store(from, h, StoreEntry{entry.key, it->second});
        return;
      }
      const std::int64_t wait_ms = h.aux > 0 ? std::min<std::int64_t>(h.aux, options_.cluster.timeout_ms)
                                             : options_.cluster.timeout_ms;
      parked_gets_.push_back(ParkedGet{from, h, entry.key, wait_ms, Clock::now() + milliseconds(wait_ms)});
      parked_gets_count_.store(parked_gets_.size(), std::memory_order_release);
      return;
    }
    if (entry.key == kLiveWorkersKey) {
      throw ProtocolError("store set of key '" + entry.key + "': a key the scheduler answers itself");
    }
    if (store_.size() >= kMaxStoreEntries && store_.count(entry.key) == 0) {
      throw ProtocolError("store set of key '" + entry.key + "': the store is full (" +
                          std::to_string(kMaxStoreEntries) + " keys)");
    }
    reply_store(from, h, StoreEntry{entry.key, {}});
    for (auto it = parked_gets_.begin(); it != parked_gets_.end();) {
      if (it->key != entry.key) {
        ++it;
        continue;
      }
      reply_store(it->routing_id, it->request, entry);
      it = parked_gets_.erase(it);
    }
    parked_gets_count_.store(parked_gets_.size(), std::memory_order_release);
    store_[entry.key] = std::move(entry.value);
  } catch (const ProtocolError& e) {
    refuse(from, h, e.what());
  }
}

void Scheduler::reply_store(const PeerId& to, const Header& request, const StoreEntry& entry) {
  Header r;
  r.type = MsgType::kStoreReply;
  r.role = Role::kScheduler;
  r.sender = 0;
  r.request_id = request.request_id;
  send_quietly(to, r, Payload::bytes(wire_encode(entry)));
}

void Scheduler::expire_store_gets() {
  const auto now = Clock::now();
  for (auto it = parked_gets_.begin(); it != parked_gets_.end();) {
    if (it->deadline > now) {
      ++it;
      continue;
    }
    const std::string reason = "store get of key '" + it->key + "' from " + std::string(to_string(it->request.role)) +
                               " " + std::to_string(it->request.sender) + ": no node set it within " +
                               std::to_string(it->wait_ms) + " ms";
    log_.warn(reason);
    try {
      router_->send_error(it->routing_id, it->request, Role::kScheduler, 0, Status::kRejected, reason);
    } catch (const TransportError&) {
      // That node is gone already.
    }
    it = parked_gets_.erase(it);
  }
  parked_gets_count_.store(parked_gets_.size(), std::memory_order_release);
}

void Scheduler::send_heartbeats() {
  const auto now = Clock::now();
  if (now - last_heartbeat_sent_ < milliseconds(options_.cluster.heartbeat_interval_ms)) return;
  last_heartbeat_sent_ = now;
  Header h;
  h.type = MsgType::kHeartbeat;
  h.role = Role::kScheduler;
  h.sender = 0;
  for (Node& n : nodes_) {
    if (!n.dropped && !n.restarting) send_quietly(n.routing_id, h);
  }
}

void Scheduler::tell_workers(MsgType type, std::int64_t key, const std::string& text) {
  Header h;
  h.type = type;
  h.role = Role::kScheduler;
  h.sender = 0;
  h.key = key;
  for (Node& n : nodes_) {
    if (n.role == Role::kWorker && !n.dropped && !n.done) send_quietly(n.routing_id, h, Payload::bytes(text));
  }
}

void Scheduler::server_failed(Node& node, const std::string& reason, bool silent) {
  if (options_.cluster.on_server_failure != "restart") fail(reason);
  if (node.restarting) return;  // the failed process spoke again before its replacement came: already handled
  if (node.restarts >= options_.cluster.max_restarts) {
    fail(reason + "; not restarted again: it was restarted " + std::to_string(node.restarts) +
         " times already (cluster.max_restarts = " + std::to_string(options_.cluster.max_restarts) + ")");
  }
  node.restarting = true;
  node.failed_at = Clock::now();
  node.restart_deadline = node.failed_at + milliseconds(options_.cluster.timeout_ms);
  node.failure = reason;
  report_failure(node, reason, silent, "restart");
  log_.warn(reason + ": waiting up to " + std::to_string(options_.cluster.timeout_ms) + " ms for server " +
            std::to_string(node.rank) + " to rejoin (cluster.on_server_failure = \"restart\"); its updates since the "
            "last checkpoint are lost");
  tell_workers(MsgType::kServerRestarting, node.rank, reason);
}

void Scheduler::on_server_rejoin(const PeerId& from, const Message& msg) {
  const std::string body = msg.text_payload();
  RegisterRequest req = wire_decode<RegisterRequest>(std::as_bytes(std::span(body.data(), body.size())), "register body");
  if (req.role != Role::kServer || msg.header.role != Role::kServer) {
    throw ProtocolError("register after the rendezvous: the job is already running");
  }
  if (options_.security != nullptr && options_.security->curve) {
    const char* key_role = key_of(msg);
    if (key_role == nullptr || std::string_view(key_role) != "server") {
      throw ProtocolError("rejoin: a " + std::string(key_role == nullptr ? "unknown" : key_role) +
                          " key cannot register as a server");
    }
  }
  const std::string who = "rejoin of a server from " + req.host + " (pid " + std::to_string(req.pid) + ")";
  if (req.requested_rank < 0 || req.requested_rank >= options_.num_servers) {
    throw ProtocolError(who + ": refused: the job is running, a server can only take back a failed rank (--rank R "
                        "--rejoin, R in [0, " + std::to_string(options_.num_servers) + "))");
  }
  Node* node = find(Role::kServer, req.requested_rank);
  if (node == nullptr) throw ProtocolError(who + ": refused: no server of rank " + std::to_string(req.requested_rank));
  if (node->request.job_fingerprint != req.job_fingerprint) {
    throw ProtocolError(who + ": refused: it runs a different job: '" + req.job_fingerprint + "' vs '" +
                        node->request.job_fingerprint + "' (the same config?)");
  }
  if (!node->restarting) {
    const auto silent = std::chrono::duration_cast<milliseconds>(Clock::now() - node->last_seen).count();
    throw ProtocolError(who + " as rank " + std::to_string(node->rank) + ": refused: server " +
                        std::to_string(node->rank) + " is alive (pid " + std::to_string(node->request.pid) +
                        ", heard " + std::to_string(silent) + " ms ago); only a failed server's rank can be taken back" +
                        (options_.cluster.on_server_failure == "restart" ? "" : " (and cluster.on_server_failure is \"abort\")"));
  }
  std::random_device entropy;
  node->token.clear();
  for (int i = 0; i < 8; ++i) {
    static constexpr char kHex[] = "0123456789abcdef";
    const unsigned v = entropy();
    for (int k = 0; k < 4; ++k) node->token += kHex[(v >> (4 * k)) & 15u];
  }
  node->routing_id = from;
  node->request = std::move(req);
  node->restarting = false;
  node->last_seen = Clock::now();
  ++node->restarts;
  RegisterReply reply;
  reply.rank = node->rank;
  reply.num_servers = options_.num_servers;
  reply.num_workers = options_.num_workers;
  reply.server_endpoints.resize(static_cast<std::size_t>(options_.num_servers));
  reply.worker_tokens.resize(static_cast<std::size_t>(options_.num_workers));
  reply.token = node->token;
  for (const Node& n : nodes_) {
    if (n.role == Role::kServer) reply.server_endpoints[static_cast<std::size_t>(n.rank)] = n.request.endpoint;
    if (n.role == Role::kWorker) {
      reply.worker_tokens[static_cast<std::size_t>(n.rank)] = n.token;
      if (reply.layout.tensors().empty()) reply.layout = n.request.layout;
    }
  }
  Header h;
  h.type = MsgType::kRegisterReply;
  h.role = Role::kScheduler;
  h.sender = 0;
  send_quietly(node->routing_id, h, Payload::bytes(wire_encode(reply)));
  const auto down_ms = std::chrono::duration_cast<milliseconds>(Clock::now() - node->failed_at).count();
  log_.info("server " + std::to_string(node->rank) + " rejoined from " + node->request.host + " (pid " +
            std::to_string(node->request.pid) + ") at " + node->request.endpoint + ", " + std::to_string(down_ms) +
            " ms after it failed (restart " + std::to_string(node->restarts) + " of at most " +
            std::to_string(options_.cluster.max_restarts) + "); workers reconnect");
  tell_workers(MsgType::kServerBack, node->rank, node->request.endpoint);
}

void Scheduler::check_liveness() {
  const auto now = Clock::now();
  for (Node& n : nodes_) {
    if (n.done || n.dropped) continue;
    if (n.restarting) {
      if (now > n.restart_deadline) {
        fail("server " + std::to_string(n.rank) + " did not come back within " +
             std::to_string(options_.cluster.timeout_ms) + " ms (cluster.timeout_ms) after it failed (" + n.failure +
             "); no rejoin registration of rank " + std::to_string(n.rank) + " arrived");
      }
      continue;
    }
    const auto silent = std::chrono::duration_cast<milliseconds>(now - n.last_seen).count();
    if (silent > options_.cluster.heartbeat_timeout_ms) {
      const std::string reason = std::string(to_string(n.role)) + " " + std::to_string(n.rank) + " (" +
                                 n.request.host + ", pid " + std::to_string(n.request.pid) + ") sent no heartbeat for " +
                                 std::to_string(silent) + " ms (limit " +
                                 std::to_string(options_.cluster.heartbeat_timeout_ms) + " ms)";
      if (n.role == Role::kWorker) {
        worker_failed(n, reason, /*silent=*/true);
      } else {
        server_failed(n, reason, /*silent=*/true);
      }
    }
  }
}

void Scheduler::report_failure(const Node& node, const std::string& reason, bool silent, const std::string& policy) {
  if (!options_.on_failure) return;
  NodeFailure f;
  f.role = node.role;
  f.rank = node.rank;
  f.pid = node.request.pid;
  f.host = node.request.host;
  f.silent = silent;
  f.time_s = log_.clock().now_s();
  const auto silent_for = std::chrono::duration<double>(Clock::now() - node.last_seen).count();
  f.last_seen_s = f.time_s - silent_for;
  f.policy = policy;
  f.reason = reason;
  options_.on_failure(f);
}

std::string to_json_line(const NodeFailure& f) {
  return JsonLine()
      .add("role", to_string(f.role))
      .add("rank", f.rank)
      .add("pid", f.pid)
      .add("host", f.host)
      .add("silent", f.silent)
      .add("last_seen_s", f.last_seen_s)
      .add("time_s", f.time_s)
      .add("policy", f.policy)
      .add("reason", f.reason)
      .str();
}

void Scheduler::broadcast(MsgType type, const std::string& text, bool include_done) {
  Header h;
  h.type = type;
  h.role = Role::kScheduler;
  h.sender = 0;
  for (Node& n : nodes_) {
    if ((!include_done && n.done) || n.dropped) continue;
    try {
      if (text.empty() && type != MsgType::kAbort) {
        router_->send(n.routing_id, h);
      } else {
        router_->send(n.routing_id, h, Payload::bytes(text));
      }
    } catch (const TransportError&) {
      // That node is gone already.
    }
  }
}

void Scheduler::fail(const std::string& reason) {
  log_.error("aborting the job: " + reason);
  broadcast(MsgType::kAbort, reason, false);
  throw AbortedError(reason);
}

}  // namespace pstrain
