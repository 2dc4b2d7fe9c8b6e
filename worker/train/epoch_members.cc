#include "worker/train/epoch_members.h"

#include <algorithm>
#include <string>

#include "common/checkpoint/checkpoint.h"
#include "common/base/errors.h"
#include "common/wire/protocol.h"
#include "common/node/scheduler_client.h"

namespace pstrain {

std::string epoch_members_key(int epoch) { return std::string(kEpochMembersPrefix) + std::to_string(epoch); }

std::string format_members(const std::vector<int>& members) {
  std::string text;
  for (const int r : members) {
    if (!text.empty()) text += ',';
    text += std::to_string(r);
  }
  return text;
}

std::vector<int> parse_members(const std::string& text) {
  const auto bad = [&](const std::string& why) {
    return ProtocolError("epoch members '" + text + "': " + why + " (expected ranks in increasing order, e.g. 0,2,3)");
  };
  std::vector<int> members;
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    if (item.empty() || item.size() > 9 || item.find_first_not_of("0123456789") != std::string::npos) {
      throw bad("'" + item + "' is not a rank");
    }
    const int rank = std::stoi(item);
    if (!members.empty() && rank <= members.back()) throw bad("not increasing at " + item);
    members.push_back(rank);
    at = comma + 1;
  }
  return members;
}

EpochShard epoch_shard(const std::vector<int>& members, int rank) {
  if (members.empty()) throw ConfigError("epoch shard of worker " + std::to_string(rank) + ": no member workers");
  const auto it = std::find(members.begin(), members.end(), rank);
  const int replicas = static_cast<int>(members.size());
  if (it == members.end()) return EpochShard{rank % replicas, replicas, false};
  return EpochShard{static_cast<int>(it - members.begin()), replicas, true};
}

EpochMembers::EpochMembers(AskFn ask, std::vector<std::int64_t> history) : ask_(std::move(ask)) {
  for (std::size_t i = 0; i < history.size();) {
    if (i + 2 > history.size()) throw CheckpointError("epoch members history: truncated");
    const std::int64_t epoch = history[i];
    const std::int64_t count = history[i + 1];
    if (epoch < 0 || epoch > 1'000'000 || count < 1 || i + 2 + static_cast<std::size_t>(count) > history.size()) {
      throw CheckpointError("epoch members history: bad entry at " + std::to_string(i));
    }
    std::vector<int> members;
    for (std::int64_t k = 0; k < count; ++k) members.push_back(static_cast<int>(history[i + 2 + static_cast<std::size_t>(k)]));
    if (static_cast<std::size_t>(epoch) >= epochs_.size()) epochs_.resize(static_cast<std::size_t>(epoch) + 1);
    epochs_[static_cast<std::size_t>(epoch)] = std::move(members);
    i += 2 + static_cast<std::size_t>(count);
  }
}

const std::vector<int>& EpochMembers::of(int epoch) {
  if (epoch < 0) throw ConfigError("epoch members: epoch " + std::to_string(epoch) + " < 0");
  const auto e = static_cast<std::size_t>(epoch);
  if (e >= epochs_.size()) epochs_.resize(e + 1);
  if (epochs_[e].empty()) {
    std::vector<int> members = ask_(epoch);
    if (members.empty()) throw ProtocolError("epoch " + std::to_string(epoch) + ": no member workers");
    epochs_[e] = std::move(members);
  }
  return epochs_[e];
}

std::vector<std::int64_t> EpochMembers::history() const {
  std::vector<std::int64_t> flat;
  for (std::size_t e = 0; e < epochs_.size(); ++e) {
    if (epochs_[e].empty()) continue;
    flat.push_back(static_cast<std::int64_t>(e));
    flat.push_back(static_cast<std::int64_t>(epochs_[e].size()));
    for (const int r : epochs_[e]) flat.push_back(r);
  }
  return flat;
}

int lowest_live_worker(SchedulerClient& scheduler, int timeout_ms) {
  return parse_members(scheduler.store_get(std::string(kLiveWorkersKey), timeout_ms)).front();
}

EpochMembers::AskFn EpochMembers::from_scheduler(SchedulerClient& scheduler, int timeout_ms) {
  return [&scheduler, timeout_ms](int epoch) { return parse_members(scheduler.store_get(epoch_members_key(epoch), timeout_ms)); };
}

EpochMembers::AskFn EpochMembers::all_of(int num_workers) {
  return [num_workers](int) {
    std::vector<int> all;
    for (int r = 0; r < num_workers; ++r) all.push_back(r);
    return all;
  };
}

}  // namespace pstrain
