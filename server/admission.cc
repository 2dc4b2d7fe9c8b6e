#include "server/admission.h"

#include <algorithm>
#include <optional>

#include "server/request_error.h"

namespace pstrain {

void Admission::bind(const std::vector<std::string>& worker_tokens) {
  for (std::size_t w = 0; w < worker_tokens.size(); ++w) {
    worker_of_connection_["w" + worker_tokens[w]] = static_cast<int>(w);
  }
}

void Admission::rebind(int worker, const std::string& token) {
  std::erase_if(worker_of_connection_, [&](const auto& entry) { return entry.second == worker; });
  worker_of_connection_["w" + token] = worker;
}

void Admission::admit(const Envelope& env) const {
  check_key_binding(env);
  const Header& h = env.message.header;
  if (h.role != Role::kWorker) {
    throw RequestError(Status::kBadRequest, std::string(to_string(h.type)) + " from a " +
                                                std::string(to_string(h.role)) + ": servers only serve workers");
  }
  const auto bound = worker_of_connection_.find(env.from.bytes());
  if (bound == worker_of_connection_.end()) {
    throw RequestError(Status::kBadRequest, std::string(to_string(h.type)) + " claiming to be worker " +
                                                std::to_string(h.sender) +
                                                " from a connection no worker of this job was given: refused");
  }
  if (bound->second != h.sender) {
    throw RequestError(Status::kBadRequest, std::string(to_string(h.type)) + " claiming to be worker " +
                                                std::to_string(h.sender) + " on worker " +
                                                std::to_string(bound->second) + "'s connection: refused");
  }
}

bool Admission::allows(const Envelope& env) const {
  const Header& h = env.message.header;
  if (security_ != nullptr && security_->curve) {
    const std::optional<KeyOwner> owner = key_owner(env.user_id);
    if (!owner || owner->role != Role::kWorker || (owner->rank >= 0 && owner->rank != h.sender)) return false;
  }
  if (h.role != Role::kWorker) return false;
  const auto bound = worker_of_connection_.find(env.from.bytes());
  return bound != worker_of_connection_.end() && bound->second == h.sender;
}

std::vector<PeerId> Admission::connections() const {
  std::vector<PeerId> out;
  out.reserve(worker_of_connection_.size());
  for (const auto& [connection, worker] : worker_of_connection_) out.emplace_back(connection);
  return out;
}

MemoryLimits server_memory_limits(const ClusterConfig& cluster, std::int64_t shard_bytes, int num_workers) {
  return node_memory_limits(cluster, kBudgetPerWorkerShards * std::max(num_workers, 1) * shard_bytes);
}

std::string memory_budget_warning(const ClusterConfig& cluster, std::int64_t shard_bytes, int num_workers) {
  const std::int64_t need = 2 * std::int64_t{std::max(num_workers, 1)} * shard_bytes;
  return memory_budget_warning(cluster, need,
                               "the workers' pull replies may need here (2 x " + std::to_string(num_workers) +
                                   " workers x " + std::to_string(shard_bytes) + " bytes of shard)");
}

// CURVE with per-worker keys: a request in worker R's name only over worker-R's key.
void Admission::check_key_binding(const Envelope& env) const {
  if (security_ == nullptr || !security_->curve) return;
  const Header& h = env.message.header;
  const std::optional<KeyOwner> owner = key_owner(env.user_id);
  if (owner && owner->role == Role::kWorker && (owner->rank < 0 || owner->rank == h.sender)) return;
  throw RequestError(Status::kBadRequest, std::string(to_string(h.type)) + " claiming to be worker " +
                                              std::to_string(h.sender) + " over a connection authenticated with the " +
                                              (env.user_id.empty() ? std::string("unknown") : env.user_id) +
                                              " key: refused");
}

}  // namespace pstrain
