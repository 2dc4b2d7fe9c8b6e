#include "scheduler/membership.h"

#include <algorithm>
#include <set>

#include "common/base/errors.h"

namespace pstrain {

using std::chrono::milliseconds;

bool same_layout(const ParamLayout& a, const ParamLayout& b) {
  const auto& x = a.tensors();
  const auto& y = b.tensors();
  return x.size() == y.size() && std::equal(x.begin(), x.end(), y.begin(), [](const TensorSpec& p, const TensorSpec& q) {
           return p.name == q.name && p.shape == q.shape;
         });
}

void bind_rank_to_key(const KeyOwner& owner, const std::string& key_name, RegisterRequest& req) {
  if (owner.rank < 0) return;  // a key shared by the role: any free rank
  if (req.requested_rank >= 0 && req.requested_rank != owner.rank) {
    throw ProtocolError("register: a " + key_name + " key cannot register as " + std::string(to_string(req.role)) +
                        " rank " + std::to_string(req.requested_rank) + ": refused");
  }
  req.requested_rank = owner.rank;  // a per-worker key registers its own rank only
}

namespace {
constexpr std::size_t kNoNode = static_cast<std::size_t>(-1);  // a rank nobody holds (worker_at_, server_at_)
}  // namespace

Membership::Membership(int num_servers, int num_workers, ClusterConfig cluster, std::vector<int> initial_workers)
    : num_servers_(num_servers), num_workers_(num_workers),
      slots_(std::max(num_workers, cluster.max_workers)), cluster_(std::move(cluster)),
      initial_(std::move(initial_workers)) {
  nodes_.reserve(static_cast<std::size_t>(std::max(num_servers, 0) + std::max(slots_, 0)));
  if (initial_.empty()) {
    for (int w = 0; w < num_workers; ++w) initial_.push_back(w);
  }
  for (std::size_t i = 0; i < initial_.size(); ++i) {
    if (initial_[i] < 0 || initial_[i] >= slots_ || (i > 0 && initial_[i] <= initial_[i - 1])) {
      throw ConfigError("scheduler: the workers to start with must be distinct ranks, ascending, within the job's " +
                        std::to_string(slots_) + " slots (cluster.max_workers); got rank " +
                        std::to_string(initial_[i]));
    }
  }
}

Member& Membership::admit(const PeerId& from, RegisterRequest req, SchedulerClock::time_point now) {
  const bool server = req.role == Role::kServer;
  const int limit = server ? num_servers_ : static_cast<int>(initial_.size());
  if (!server && req.requested_rank >= 0 &&
      !std::binary_search(initial_.begin(), initial_.end(), req.requested_rank)) {
    const bool first_n = initial_.back() + 1 == static_cast<int>(initial_.size());
    throw ProtocolError("register: requested worker rank " + std::to_string(req.requested_rank) +
                        (first_n ? " is outside [0, " + std::to_string(initial_.size()) + ")"
                                 : " is not one of the job's workers at its start (" + initial_text() +
                                       ": the members of the checkpoint it resumes); a new worker joins with --join"));
  }
  int count = 0;
  for (const Member& n : nodes_) count += n.role == req.role ? 1 : 0;
  if (count >= limit) {
    throw ProtocolError("register: the job already has its " + std::to_string(limit) + " " +
                        std::string(to_string(req.role)) + "s (a " + std::string(to_string(req.role)) + " from " +
                        req.host + " pid " + std::to_string(req.pid) + " is one too many)");
  }
  if (server && req.requested_rank >= limit) {
    throw ProtocolError("register: requested server rank " + std::to_string(req.requested_rank) + " is outside [0, " +
                        std::to_string(limit) + ")");
  }
  for (const Member& n : nodes_) {
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
  Member node;
  node.role = req.role;
  node.routing_id = from;
  node.request = std::move(req);
  node.last_seen = now;
  nodes_.push_back(std::move(node));
  recount();
  return nodes_.back();
}

void Membership::refuse_other_layout(const RegisterRequest& req) const {
  for (const Member& n : nodes_) {
    if (n.role != Role::kWorker) continue;
    if (!same_layout(n.request.layout, req.layout)) {
      throw ProtocolError("register: refused a worker from " + req.host + " (pid " + std::to_string(req.pid) +
                          "): it has a different model layout (" + std::to_string(req.layout.tensors().size()) +
                          " tensors, " + std::to_string(req.layout.total_elems()) +
                          " parameters) from the workers registered (" +
                          std::to_string(n.request.layout.tensors().size()) + " tensors, " +
                          std::to_string(n.request.layout.total_elems()) + " parameters)");
    }
    return;  // every registered worker has the first one's layout
  }
}

bool Membership::complete() const {
  return nodes_.size() >= static_cast<std::size_t>(num_servers_) + initial_.size();
}

std::string Membership::roster() const {
  int servers = 0, workers = 0;
  for (const Member& n : nodes_) (n.role == Role::kServer ? servers : workers)++;
  return "registered " + std::to_string(servers) + "/" + std::to_string(num_servers_) + " servers and " +
         std::to_string(workers) + "/" + std::to_string(initial_.size()) + " workers";
}

void Membership::assign_ranks() {
  for (Role role : {Role::kServer, Role::kWorker}) {
    std::set<int> taken;
    for (Member& n : nodes_) {
      if (n.role == role && n.request.requested_rank >= 0) {
        n.rank = n.request.requested_rank;
        taken.insert(n.rank);
      }
    }
    // Servers fill 0, 1, ...; workers the initial ranks (0..num_workers-1 unless resumed) not requested.
    std::size_t next = 0;
    const auto rank_at = [&](std::size_t i) { return role == Role::kServer ? static_cast<int>(i) : initial_[i]; };
    for (Member& n : nodes_) {
      if (n.role != role || n.rank >= 0) continue;
      while (taken.count(rank_at(next))) ++next;
      n.rank = rank_at(next);
      taken.insert(n.rank);
    }
  }
  // The index by rank: ranks are in range (admit) and distinct (above).
  worker_at_.assign(static_cast<std::size_t>(slots_), kNoNode);
  server_at_.assign(static_cast<std::size_t>(num_servers_), kNoNode);
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    std::vector<std::size_t>& at = nodes_[i].role == Role::kServer ? server_at_ : worker_at_;
    if (nodes_[i].rank < static_cast<int>(at.size())) at[static_cast<std::size_t>(nodes_[i].rank)] = i;
  }
  recount();
}

std::string Membership::initial_text() const {
  std::string s;
  for (const int r : initial_) s += (s.empty() ? "" : ",") + std::to_string(r);
  return s;
}

void Membership::recount() {
  live_.clear();
  barrier_members_ = 0;
  for (const Member& n : nodes_) {
    if (n.role != Role::kWorker || n.dropped || n.retired || n.joining) continue;
    live_.push_back(n.rank);
    barrier_members_ += n.done ? 0 : 1;
  }
  std::sort(live_.begin(), live_.end());
}

void Membership::mark_done(Member& m) {
  if (m.done) return;  // said twice: counted once
  m.done = true;
  if (m.role == Role::kWorker && !m.dropped && !m.retired && !m.joining) --barrier_members_;
}

std::optional<std::string> Membership::layout_mismatch() const {
  const Member* first_worker = nullptr;
  for (const Member& n : nodes_) {
    if (n.role != Role::kWorker) continue;
    if (first_worker == nullptr) {
      first_worker = &n;
      continue;
    }
    if (!same_layout(first_worker->request.layout, n.request.layout)) {
      auto describe = [](const ParamLayout& l) {
        return std::to_string(l.tensors().size()) + " tensors, " + std::to_string(l.total_elems()) + " parameters";
      };
      return "worker " + std::to_string(n.rank) + " has a different model layout (" + describe(n.request.layout) +
             ") from worker " + std::to_string(first_worker->rank) + " (" + describe(first_worker->request.layout) +
             ")";
    }
  }
  return std::nullopt;
}

RegisterReply Membership::job_reply() const {
  RegisterReply reply;
  reply.num_servers = num_servers_;
  reply.num_workers = num_workers_;
  reply.server_endpoints.resize(static_cast<std::size_t>(num_servers_));
  bool have_layout = false;
  for (const Member& n : nodes_) {
    if (n.role == Role::kServer) reply.server_endpoints[static_cast<std::size_t>(n.rank)] = n.request.endpoint;
    if (n.role == Role::kWorker && !have_layout) {
      reply.layout = n.request.layout;
      have_layout = true;
    }
  }
  return reply;
}

std::vector<std::string> Membership::worker_tokens() const {
  std::vector<std::string> tokens(static_cast<std::size_t>(num_workers_));
  for (const Member& n : nodes_) {
    if (n.role != Role::kWorker || n.retired) continue;
    if (n.rank >= static_cast<int>(tokens.size())) tokens.resize(static_cast<std::size_t>(n.rank) + 1);
    tokens[static_cast<std::size_t>(n.rank)] = n.token;
  }
  return tokens;
}

Member* Membership::find(Role role, int rank) {
  const std::vector<std::size_t>& at = role == Role::kServer ? server_at_ : worker_at_;
  if (role != Role::kScheduler && !at.empty()) {  // ranks assigned: the index
    if (rank < 0 || rank >= static_cast<int>(at.size()) || at[static_cast<std::size_t>(rank)] >= nodes_.size()) {
      return nullptr;
    }
    Member& n = nodes_[at[static_cast<std::size_t>(rank)]];
    return n.role == role && n.rank == rank ? &n : nullptr;
  }
  for (Member& n : nodes_) {
    if (n.role == role && n.rank == rank) return &n;
  }
  return nullptr;
}

const Member* Membership::on_connection(const PeerId& from) const {
  for (const Member& n : nodes_) {
    if (n.routing_id == from) return &n;
  }
  return nullptr;
}

std::string Membership::live_worker_ranks() const {
  std::string live;
  for (const int r : live_worker_list()) {
    if (!live.empty()) live += ',';
    live += std::to_string(r);
  }
  return live;
}

bool Membership::workers_done(SchedulerClock::time_point now) const {
  // A worker neither dropped nor done holds the end (and a barrier: one that
  // is done has passed every barrier, a rejoiner may come after it).
  if (barrier_members_ > 0) return false;
  return std::all_of(nodes_.begin(), nodes_.end(), [&](const Member& n) {
    return n.role != Role::kWorker || n.done || n.retired || n.joining || (n.dropped && !may_rejoin(n, now));
  });
}

void Membership::drop(Member& m, SchedulerClock::time_point now) {
  m.dropped = true;
  m.dropped_at = now;
  recount();
}

void Membership::begin_restart(Member& m, const std::string& reason, SchedulerClock::time_point now) {
  m.restarting = true;
  m.failed_at = now;
  m.restart_deadline = now + milliseconds(cluster_.timeout_ms);
  m.failure = reason;
}

bool Membership::may_rejoin(const Member& m, SchedulerClock::time_point now) const {
  // Allreduce workers (their fingerprint names the collective) do not rejoin yet.
  return cluster_.on_worker_failure == WorkerFailurePolicy::kRestart && m.rejoins < cluster_.max_restarts &&
         m.request.job_fingerprint.find(" collective=") == std::string::npos &&
         now - m.dropped_at < milliseconds(cluster_.timeout_ms);
}

std::vector<int> Membership::restartable_workers() const {
  std::vector<int> down;
  if (cluster_.on_worker_failure != WorkerFailurePolicy::kRestart) return down;
  for (const Member& n : nodes_) {
    if (n.role == Role::kWorker && n.dropped && !n.retired && !n.done && !n.joining && n.rejoins < cluster_.max_restarts) {
      down.push_back(n.rank);
    }
  }
  std::sort(down.begin(), down.end());
  return down;
}

Member& Membership::admit_worker_rejoin(const RegisterRequest& req, const std::string& who) {
  if (cluster_.on_worker_failure != WorkerFailurePolicy::kRestart) {
    throw ProtocolError("rejoin of " + who + ": refused, cluster.on_worker_failure is \"" +
                        std::string(to_string(cluster_.on_worker_failure)) + "\", not \"restart\"");
  }
  if (req.requested_rank < 0 || req.requested_rank >= slots_) {  // a joiner's slot too: a member past its boundary
    throw ProtocolError("rejoin of " + who + ": refused, the job has no worker rank " +
                        std::to_string(req.requested_rank) + " (it has " + std::to_string(slots_) +
                        "; a rejoin names the rank it takes back with --rank)");
  }
  Member* node = find(Role::kWorker, req.requested_rank);
  if (node == nullptr) throw ProtocolError("rejoin of " + who + ": refused, no such worker registered");
  if (!node->dropped) {
    const std::string state = node->done ? " has finished" : " is alive (pid " + std::to_string(node->request.pid) + ")";
    const std::string why = "rejoin of " + who + ": refused, worker " + std::to_string(node->rank) + state +
                            "; only a worker dropped from the job can be taken back";
    if (node->done) throw ProtocolError(why);
    throw RetryLaterError(why);  // until the scheduler has noticed the failure (heartbeat_timeout_ms)
  }
  if (node->rejoins >= cluster_.max_restarts) {
    throw ProtocolError("rejoin of " + who + ": refused, worker " + std::to_string(node->rank) +
                        " was already taken back " + std::to_string(node->rejoins) + " times (cluster.max_restarts = " +
                        std::to_string(cluster_.max_restarts) + ")");
  }
  if (req.job_fingerprint != node->request.job_fingerprint) {
    throw ProtocolError("rejoin of " + who + ": refused, it runs a different job: '" + req.job_fingerprint + "' vs '" +
                        node->request.job_fingerprint + "'");
  }
  req.layout.validate();
  if (!same_layout(req.layout, node->request.layout)) {
    throw ProtocolError("rejoin of " + who + ": refused, its model layout differs from the job's");
  }
  return *node;
}

Member& Membership::admit_server_rejoin(const RegisterRequest& req, const std::string& who,
                                        SchedulerClock::time_point now) {
  if (req.requested_rank < 0 || req.requested_rank >= num_servers_) {
    throw ProtocolError(who + ": refused: the job is running, a server can only take back a failed rank (--rank R "
                        "--rejoin, R in [0, " + std::to_string(num_servers_) + "))");
  }
  Member* node = find(Role::kServer, req.requested_rank);
  if (node == nullptr) throw ProtocolError(who + ": refused: no server of rank " + std::to_string(req.requested_rank));
  if (node->request.job_fingerprint != req.job_fingerprint) {
    throw ProtocolError(who + ": refused: it runs a different job: '" + req.job_fingerprint + "' vs '" +
                        node->request.job_fingerprint + "' (the same config?)");
  }
  if (!node->restarting) {
    const auto silent = std::chrono::duration_cast<milliseconds>(now - node->last_seen).count();
    const bool restart = cluster_.on_server_failure == ServerFailurePolicy::kRestart;
    const std::string why = who + " as rank " + std::to_string(node->rank) + ": refused: server " +
                            std::to_string(node->rank) + " is alive (pid " + std::to_string(node->request.pid) +
                            ", heard " + std::to_string(silent) + " ms ago); only a failed server's rank can be " +
                            "taken back" + (restart ? "" : " (and cluster.on_server_failure is \"abort\")");
    // Under "restart" the failure may not be noticed yet (a respawn is quicker than the heartbeat timeout).
    if (restart) throw RetryLaterError(why);
    throw ProtocolError(why);
  }
  return *node;
}

void Membership::take_back_worker(Member& m, const PeerId& from, RegisterRequest req, std::string token,
                                  SchedulerClock::time_point now) {
  m.routing_id = from;
  m.request = std::move(req);
  m.token = std::move(token);
  m.dropped = false;
  m.told_dropped = false;
  m.done = false;
  m.last_seen = now;
  ++m.rejoins;
  recount();
}

void Membership::take_back_server(Member& m, const PeerId& from, RegisterRequest req, std::string token,
                                  SchedulerClock::time_point now) {
  m.token = std::move(token);
  m.routing_id = from;
  m.request = std::move(req);
  m.restarting = false;
  m.told_dropped = false;
  m.last_seen = now;
  ++m.restarts;
}

bool Membership::vacant(int rank) {
  if (rank < 0 || rank >= slots_) return false;
  const Member* m = find(Role::kWorker, rank);
  return m == nullptr || m->retired;
}

int Membership::admit_worker_join(const RegisterRequest& req, const std::string& who) {
  const std::string refused = "join of " + who + ": refused, ";
  if (worker_at_.empty()) throw RetryLaterError(refused + "the job has not started yet (its rendezvous is not over)");
  if (slots_ <= num_workers_) {
    throw ProtocolError(refused + "the job is not elastic (cluster.max_workers = cluster.workers = " +
                        std::to_string(num_workers_) + ")");
  }
  for (const Member& n : nodes_) {
    if (n.request.job_fingerprint != req.job_fingerprint) {
      throw ProtocolError(refused + "it runs a different job: '" + req.job_fingerprint + "' vs '" +
                          n.request.job_fingerprint + "' (the same config?)");
    }
  }
  req.layout.validate();
  for (const Member& n : nodes_) {
    if (n.role == Role::kWorker && !same_layout(n.request.layout, req.layout)) {
      throw ProtocolError(refused + "it has a different model layout (" + std::to_string(req.layout.total_elems()) +
                          " parameters) from the job's (" + std::to_string(n.request.layout.total_elems()) + ")");
    }
  }
  if (req.requested_rank >= 0) {
    if (req.requested_rank >= slots_) {
      throw ProtocolError(refused + "worker rank " + std::to_string(req.requested_rank) +
                          " is outside the job's slots [0, " + std::to_string(slots_) + ") (cluster.max_workers)");
    }
    if (!vacant(req.requested_rank)) {
      throw ProtocolError(refused + "worker rank " + std::to_string(req.requested_rank) + " is in use");
    }
    return req.requested_rank;
  }
  for (int rank = 0; rank < slots_; ++rank) {
    if (vacant(rank)) return rank;
  }
  throw ProtocolError(refused + "the job is full (" + std::to_string(slots_) + " workers in its " +
                      std::to_string(slots_) + " slots, cluster.max_workers)");
}

Member& Membership::add_joined_worker(const PeerId& from, RegisterRequest req, int rank, std::string token,
                                      SchedulerClock::time_point now) {
  Member* slot = find(Role::kWorker, rank);
  if (slot == nullptr) {  // a slot nobody held: a new entry (capacity reserved: nothing moves)
    nodes_.emplace_back();
    slot = &nodes_.back();
    worker_at_[static_cast<std::size_t>(rank)] = nodes_.size() - 1;
  }
  *slot = Member{};
  slot->role = Role::kWorker;
  slot->rank = rank;
  slot->routing_id = from;
  slot->request = std::move(req);
  slot->token = std::move(token);
  slot->last_seen = now;
  slot->joined = true;
  slot->joining = true;
  recount();
  return *slot;
}

void Membership::enter_joined(Member& m) {
  if (!m.joining) return;
  m.joining = false;
  recount();
}

void Membership::abandon_join(Member& m) {
  if (!m.joining) return;
  m.joining = false;
  m.retired = true;  // vacant() again
  recount();
}

std::optional<std::string> Membership::resize_refusal(int workers) const {
  const int low = min_workers(cluster_);
  if (workers < low) {
    return "the job cannot shrink to " + std::to_string(workers) + " workers: cluster.min_workers is " +
           std::to_string(low);
  }
  if (workers > slots_) {
    return "the job cannot grow to " + std::to_string(workers) + " workers: it has " + std::to_string(slots_) +
           " slots (cluster.max_workers)";
  }
  return std::nullopt;
}

void Membership::retire(Member& m) {
  if (m.role != Role::kWorker || m.retired) return;
  m.retired = true;
  recount();
}

}  // namespace pstrain
