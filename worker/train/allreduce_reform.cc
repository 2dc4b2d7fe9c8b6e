// The allreduce worker's re-forming collective (allreduce_worker.h): the
// replica check at an epoch's end, a collective re-formed without the dropped
// workers (cluster.on_worker_failure = "continue") or grown with rejoined ones
// ("restart"), the resync to the most advanced replica: reform_collective,
// through which in_collective (allreduce_loop.h) runs one phase again.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/base/errors.h"
#include "common/node/retry.h"
#include "worker/collective/replica_resync.h"
#include "worker/train/allreduce_loop.h"

namespace pstrain {
namespace allreduce_detail {
namespace {

// FNV-1a of the weights' bytes as three 11-bit integers: exact in float, and
// so is their mean over the ranks, which equals every rank's own value only
// when all are equal.
std::array<float, 3> weights_fingerprint(std::span<const float> params) {
  std::uint64_t hash = 1469598103934665603ull;
  const auto* bytes = reinterpret_cast<const unsigned char*>(params.data());
  for (std::size_t i = 0; i < params.size_bytes(); ++i) hash = (hash ^ bytes[i]) * 1099511628211ull;
  return {static_cast<float>(hash & 2047u), static_cast<float>((hash >> 11) & 2047u),
          static_cast<float>((hash >> 22) & 2047u)};
}

}  // namespace

// Whether rejoined workers are taken back into the collective (cluster.on_worker_failure = "restart").
bool grows(const Loop& L) {
  return L.reforms_on_failure && L.config.cluster.on_worker_failure == WorkerFailurePolicy::kRestart;
}

// The replica check at an epoch's end. Under "restart" the same allreduce
// carries, per worker rank, the take of a rejoin this replica has heard of
// (and a 1, to count the replicas that heard it), so every replica returns
// the same workers to take in (rank -> take), however late each heard.
std::map<int, std::int64_t> check_replicas(Loop& L, const char* when) {
  std::vector<float> params(static_cast<std::size_t>(L.model.num_params()));
  L.model.get_params(params);
  const std::array<float, 3> mine = weights_fingerprint(params);
  // Every worker slot (a joiner's past cluster.workers too: under "restart" it is restarted like any rank).
  const auto workers = static_cast<std::size_t>(std::max(L.session.num_workers(), max_workers(L.config.cluster)));
  std::vector<float> v(mine.begin(), mine.end());
  if (grows(L)) {
    v.resize(3 + 2 * workers, 0.0f);
    for (const auto& r : L.session.scheduler().take_rejoined()) {
      std::int64_t& take = L.rejoined[r.rank];
      take = std::max(take, r.take);
    }
    for (const auto& [rank, take] : L.rejoined) {
      if (rank < 0 || static_cast<std::size_t>(rank) >= workers || take >= (1 << 20)) continue;
      if (std::find(L.live.begin(), L.live.end(), rank) != L.live.end()) continue;
      v[3 + 2 * static_cast<std::size_t>(rank)] = static_cast<float>(take);
      v[4 + 2 * static_cast<std::size_t>(rank)] = 1.0f;
    }
  }
  // Started and waited for like a step's allreduce (wait_collective): a drop heard meanwhile ends the
  // wait at once. A blocking allreduce_mean waited out the backend's timeout (timeout_ms) on a worker
  // whose ring neighbours were alive, while the victim's neighbours re-formed at once and gave up the
  // new generation's rendezvous (also timeout_ms) just before it came (8 workers, kill -9 at an
  // epoch's end: tests/integration/sweep_faults_test.cc).
  // A membership change heard meanwhile is answered there too.
  on_collective_memory(L, v, [&](float* data) {
    L.collective->start_allreduce_mean(data, v.size());
    wait_collective(L);
  });
  const std::array<float, 3> mean{v[0], v[1], v[2]};
  if (mean != mine) {
    throw ComputeError(std::string("replica check ") + when + ": worker " + std::to_string(L.session.rank()) +
                       "'s weights differ from another worker's (fingerprint " + std::to_string(mine[0]) + "/" +
                       std::to_string(mine[1]) + "/" + std::to_string(mine[2]) + ", mean over workers " +
                       std::to_string(mean[0]) + "/" + std::to_string(mean[1]) + "/" + std::to_string(mean[2]) + ")");
  }
  std::map<int, std::int64_t> joiners;
  const auto ranks = static_cast<double>(L.collective->size());
  for (std::size_t r = 0; 3 + 2 * r + 1 < v.size(); ++r) {
    const std::int64_t heard = std::llround(static_cast<double>(v[4 + 2 * r]) * ranks);
    if (heard > 0) joiners[static_cast<int>(r)] = std::llround(static_cast<double>(v[3 + 2 * r]) * ranks) / heard;
  }
  return joiners;
}

// "restart": takes the rejoined workers `joiners` (agreed by check_replicas)
// into the collective after `steps_done` steps (an epoch's end): the next
// generation with them, published for them by the lowest worker, then the
// resync in which they take the most advanced replica.
void grow_collective(Loop& L, const std::map<int, std::int64_t>& joiners, std::int64_t steps_done) {
  AllreduceJoin join{L.live, L.generation + 1, steps_done};
  join.changes = L.changes_known;  // a rejoiner learns their segments
  std::string names;
  for (const auto& [rank, take] : joiners) {
    join.live.push_back(rank);
    names += (names.empty() ? "" : ", ") + std::to_string(rank);
  }
  std::sort(join.live.begin(), join.live.end());
  join.live.erase(std::unique(join.live.begin(), join.live.end()), join.live.end());
  if (leads(L)) {
    for (const auto& [rank, take] : joiners) L.session.scheduler().store_set(allreduce_join_key(rank, take), format_join(join));
  }
  for (const auto& [rank, take] : joiners) L.rejoined.erase(rank), L.dropped.erase(rank);
  const auto me = std::find(join.live.begin(), join.live.end(), L.session.rank());
  const int rank = static_cast<int>(me - join.live.begin());
  const int size = static_cast<int>(join.live.size());
  L.collective = nullptr;
  L.owned.reset();
  L.live = join.live;
  L.generation = join.generation;
  form_collective(L);
  const int leader = resync_replicas(L);
  L.log.warn("took rejoined worker(s) " + names + " back into the collective after step " + std::to_string(steps_done) +
             ": " + std::to_string(size) + " workers, this one rank " + std::to_string(rank) + ", generation " +
             std::to_string(L.generation) + "; replicas took worker " + std::to_string(leader) + "'s weights");
}

// After a re-form: every replica takes the most advanced one's weights,
// optimizer state and progress (worker/collective/replica_resync.h), so the
// phases it completed are not repeated and the survivors' operations in the
// new collective stay in step. Returns the leader's worker rank.
int resync_replicas(Loop& L) {
  ReplicaState state;
  state.done = L.done;
  state.optimizer_steps = L.optimizer.steps_taken();
  state.params.resize(static_cast<std::size_t>(L.model.num_params()));
  L.model.get_params(state.params);
  state.optimizer_state = L.optimizer.state();
  const ResyncOutcome r = resync_from_leader(
      *L.collective, state,
      [&L](std::span<float> host, const std::function<void(float*)>& op) { on_collective_memory(L, host, op); },
      [&L] { wait_collective(L); });  // a member dropped meanwhile ends it (a re-form follows)
  L.model.set_params(state.params);
  L.optimizer.set_state(state.optimizer_state, state.optimizer_steps);
  L.model.backend().synchronize();
  L.done = state.done;
  const int leader = L.live.at(static_cast<std::size_t>(r.leader));
  if (r.own_done != state.done && r.own_done >= 0) {  // (a new process, -1, has nothing to say)
    L.log.warn("worker " + std::to_string(leader) + " had completed more of the job before the failure (phase " +
               std::to_string(state.done) + ", this worker " + std::to_string(r.own_done) +
               "): its updates are taken, not repeated");
  }
  L.formation = false;
  return leader;
}

bool take_drops(Loop& L) {
  bool shrank = false;
  for (const int r : L.session.scheduler().take_dropped()) {
    L.dropped.insert(r);
    shrank = std::erase(L.live, r) > 0 || shrank;
  }
  return shrank;
}

void check_dropped(Loop& L) {
  if (!L.reforms_on_failure) return;
  if (take_drops(L)) throw TransportError("a worker of the collective was dropped from the job");
}

void form_collective(Loop& L) {
  const auto me = std::find(L.live.begin(), L.live.end(), L.session.rank());
  if (me == L.live.end()) throw AbortedError("worker " + std::to_string(L.session.rank()) + " was dropped from the job");
  L.forming = L.live.size();
  L.formation = true;  // until the replicas' resync completes
  L.owned = (*L.reform)(static_cast<int>(me - L.live.begin()), static_cast<int>(L.live.size()),
                        generation_label(L.generation, L.live), [&L] { check_dropped(L); });
  L.collective = L.owned.get();
}

namespace {

// Waits (retry_until, watching the scheduler) until a worker of the
// collective that failed (L.forming of them) has been dropped; false if
// none is within heartbeat_timeout_ms + timeout_ms.
bool await_drop(Loop& L) {
  const auto limit = RetryClock::now() + std::chrono::milliseconds(L.config.cluster.heartbeat_timeout_ms) +
                     std::chrono::milliseconds(L.config.cluster.timeout_ms);
  RetryOptions poll;
  poll.interval = std::chrono::milliseconds(50);
  poll.watch = watch_scheduler(L.session.scheduler(),
                               "worker " + std::to_string(L.session.rank()) + " was re-forming the collective");
  return retry_until(limit, "", nullptr, [&]() -> std::optional<bool> {
    take_drops(L);
    if (L.live.size() < L.forming) return true;
    return std::nullopt;
  }, poll).has_value();
}

// Forms the collective among `live` and resyncs the replicas until one
// forms; returns the leader. A member lost meanwhile is left out under the
// same generation number (generation_label), settle_failed_forming deciding
// alike on every member; with every member alive the same members try again
// under the next number. `failed_forming`: the collective failed while it
// formed (the first wait is settle_failed_forming's); else a drop was seen.
int form_until_resynced(Loop& L, bool failed_forming, const std::string& why) {
  const auto deadline = RetryClock::now() + std::chrono::milliseconds(L.config.cluster.heartbeat_timeout_ms) +
                        std::chrono::milliseconds(L.config.cluster.timeout_ms);
  const std::string doing = "worker " + std::to_string(L.session.rank()) + " was re-forming the collective";
  const std::function<bool()> member_dropped = [&L] {
    take_drops(L);
    return L.live.size() < L.forming;
  };
  std::string failure = why;
  for (bool settle = failed_forming;; settle = true) {
    const bool shrank = !settle || settle_failed_forming(L.session.scheduler(), L.config.cluster, member_dropped,
                                                         deadline, failure, doing);
    if (!shrank) {
      L.log.warn("no worker of the collective was dropped: all " + std::to_string(L.live.size()) +
                 " are alive; forming the collective again");
      ++L.generation;
    }
    L.collective = nullptr;
    L.owned.reset();  // the failed one goes first (its communication thread with it)
    try {
      form_collective(L);
      return resync_replicas(L);
    } catch (const TransportError& e) {
      failure = e.what();
    } catch (const TimeoutError& e) {
      failure = e.what();
    }
    L.log.warn("re-forming the collective (generation " + std::to_string(L.generation) + ") failed: " + failure +
               "; waiting for the scheduler to drop a failed worker");
  }
}

}  // namespace

// See allreduce_loop.h; what a re-form does: allreduce_worker.h (ReformCollective).
bool reform_collective(Loop& L, const std::string& why) {
  if (!L.reforms_on_failure) return false;
  const bool failed_forming = L.formation;  // a rendezvous or first resync: every member alive is retried
  const std::size_t before = L.forming;
  L.log.warn("the collective failed: " + why + "; waiting for the scheduler to drop the failed worker");
  if (!failed_forming && !await_drop(L)) return false;
  const int leader = form_until_resynced(L, failed_forming, why);
  complete_missed_checkpoint(L);
  const auto me = std::find(L.live.begin(), L.live.end(), L.session.rank());
  std::string ranks;
  for (const int r : L.live) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  L.log.warn(std::string(L.live.size() < before ? "re-formed the collective without the dropped worker(s): "
                                                : "re-formed the collective of the same workers: ") +
             std::to_string(L.live.size()) + " workers (" + ranks + "), this one rank " +
             std::to_string(me - L.live.begin()) + ", generation " + std::to_string(L.generation) +
             "; replicas took worker " + std::to_string(leader) + "'s weights and optimizer state (the most advanced)");
  return true;
}

}  // namespace allreduce_detail

bool settle_failed_forming(SchedulerClient& scheduler, const ClusterConfig& cluster,
                           const std::function<bool()>& member_dropped, std::chrono::steady_clock::time_point deadline,
                           const std::string& why, const std::string& doing) {
  const auto wait = std::chrono::milliseconds(cluster.heartbeat_timeout_ms * 3 / 2 + cluster.heartbeat_interval_ms);
  RetryOptions poll;
  poll.interval = std::chrono::milliseconds(50);
  poll.watch = watch_scheduler(scheduler, doing);
  const bool dropped = retry_until(RetryClock::now() + wait, "", nullptr, [&]() -> std::optional<bool> {
    if (member_dropped()) return true;
    return std::nullopt;
  }, poll).has_value();
  if (!dropped && RetryClock::now() >= deadline) {
    throw TransportError("forming the collective failed (" + why + ") and no worker was dropped within " +
                         std::to_string(cluster.heartbeat_timeout_ms + cluster.timeout_ms) +
                         " ms (cluster.heartbeat_timeout_ms + cluster.timeout_ms)");
  }
  return dropped;
}

std::string generation_label(int generation, const std::vector<int>& members) {
  std::uint64_t hash = 14695981039346656037ull;  // FNV-1a over the ranks' 4 bytes each
  for (const int r : members) {
    for (int b = 0; b < 4; ++b) {
      hash ^= (static_cast<std::uint32_t>(r) >> (8 * b)) & 0xffu;
      hash *= 1099511628211ull;
    }
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash));
  return std::to_string(generation) + "-" + hex;
}

std::string allreduce_join_key(int rank, std::int64_t take) {
  return "allreduce/join/" + std::to_string(rank) + "/" + std::to_string(take);
}

std::string allreduce_grow_key(std::int64_t change) { return "allreduce/grow/" + std::to_string(change); }

// "generation step rank,rank,..." or "end" (the job ended before it could be taken in: live empty).
std::string format_join(const AllreduceJoin& join) {
  if (join.live.empty()) return "end";
  std::string text = std::to_string(join.generation) + " " + std::to_string(join.first_step) + " ";
  for (std::size_t i = 0; i < join.live.size(); ++i) {
    if (i > 0) text += ',';
    text += std::to_string(join.live[i]);
  }
  if (join.changes > 0) text += " " + std::to_string(join.changes);
  return text;
}

AllreduceJoin parse_join(const std::string& text) {
  AllreduceJoin join;
  if (text == "end") return join;
  const auto a = text.find(' ');
  const auto b = a == std::string::npos ? a : text.find(' ', a + 1);
  try {
    if (b == std::string::npos) throw std::invalid_argument("fields");
    join.generation = std::stoi(text.substr(0, a));
    join.first_step = std::stoll(text.substr(a + 1, b - a - 1));
    const auto c = text.find(' ', b + 1);
    join.live = parse_members(text.substr(b + 1, c == std::string::npos ? c : c - b - 1));
    if (c != std::string::npos) {
      std::size_t used = 0;
      join.changes = std::stoll(text.substr(c + 1), &used);
      if (used != text.size() - c - 1 || join.changes < 1) throw std::invalid_argument("changes");
    }
  } catch (const std::exception&) {
    throw ProtocolError("allreduce join: malformed value '" + text + "' (expected 'generation step ranks' or 'end')");
  }
  if (join.generation < 1 || join.first_step < 0) throw ProtocolError("allreduce join: bad value '" + text + "'");
  return join;
}

}  // namespace pstrain
