#include "worker/train/epoch_members.h"

#include <algorithm>
#include <limits>
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

namespace {
// Reads one [epoch, (-from_step,) count, ranks...] entry of a history at `i`
// into `epochs`; returns the index after it.
std::size_t read_history_entry(const std::vector<std::int64_t>& h, std::size_t i,
                               std::vector<std::vector<EpochSegment>>& epochs) {
  const auto bad = [&](const std::string& why) {
    return CheckpointError("epoch members history: " + why + " at " + std::to_string(i));
  };
  if (i + 2 > h.size()) throw CheckpointError("epoch members history: truncated");
  const std::int64_t epoch = h[i];
  if (epoch < 0 || epoch > 1'000'000) throw bad("bad epoch");
  EpochSegment segment;
  std::size_t at = i + 1;
  if (h[at] < 0) {  // a later segment: [epoch, -from_step, count, ranks...]
    segment.from_step = -h[at];
    ++at;
    if (at >= h.size()) throw CheckpointError("epoch members history: truncated");
  }
  const std::int64_t count = h[at];
  if (count < 1 || at + 1 + static_cast<std::size_t>(count) > h.size()) throw bad("bad entry");
  for (std::int64_t k = 0; k < count; ++k) segment.members.push_back(static_cast<int>(h[at + 1 + static_cast<std::size_t>(k)]));
  if (static_cast<std::size_t>(epoch) >= epochs.size()) epochs.resize(static_cast<std::size_t>(epoch) + 1);
  std::vector<EpochSegment>& known = epochs[static_cast<std::size_t>(epoch)];
  if (segment.from_step > 0 ? known.empty() || segment.from_step <= known.back().from_step : !known.empty()) {
    throw bad("segment out of order");
  }
  known.push_back(std::move(segment));
  return at + 1 + static_cast<std::size_t>(count);
}
}  // namespace

EpochMembers::EpochMembers(AskFn ask, std::vector<std::int64_t> history) : ask_(std::move(ask)) {
  for (std::size_t i = 0; i < history.size();) i = read_history_entry(history, i, epochs_);
}

const std::vector<EpochSegment>& EpochMembers::segments(int epoch) {
  if (epoch < 0) throw ConfigError("epoch members: epoch " + std::to_string(epoch) + " < 0");
  const auto e = static_cast<std::size_t>(epoch);
  if (e >= epochs_.size()) epochs_.resize(e + 1);
  if (epochs_[e].empty()) {
    std::vector<int> members = ask_(epoch);
    if (members.empty()) throw ProtocolError("epoch " + std::to_string(epoch) + ": no member workers");
    epochs_[e].push_back(EpochSegment{0, std::move(members)});
  }
  return epochs_[e];
}

const std::vector<int>& EpochMembers::of(int epoch) { return segments(epoch).front().members; }

bool EpochMembers::add_segment(int epoch, std::int64_t from_step, std::vector<int> members, std::string reason) {
  const std::string what = "membership change at step " + std::to_string(from_step) + " of epoch " +
                           std::to_string(epoch) + " (members " + format_members(members) + ")";
  if (members.empty()) throw ProtocolError(what + ": no member workers");
  if (!std::is_sorted(members.begin(), members.end()) ||
      std::adjacent_find(members.begin(), members.end()) != members.end() || members.front() < 0) {
    throw ProtocolError(what + ": expected ranks in increasing order");
  }
  if (from_step < 1) throw ProtocolError(what + ": a change takes effect after the epoch's first step");
  segments(epoch);
  std::vector<EpochSegment>& known = epochs_[static_cast<std::size_t>(epoch)];
  EpochSegment segment{from_step, std::move(members), std::move(reason)};
  if (std::find(known.begin(), known.end(), segment) != known.end()) return false;  // heard again
  if (from_step <= known.back().from_step) {
    throw ProtocolError(what + ": not after the epoch's last change (step " + std::to_string(known.back().from_step) + ")");
  }
  known.push_back(std::move(segment));
  return true;
}

std::vector<std::int64_t> EpochMembers::history() const {
  return history_before(std::numeric_limits<int>::max(), 0);
}

std::vector<std::int64_t> EpochMembers::history_before(int epoch, std::int64_t step) const {
  std::vector<std::int64_t> flat;
  for (std::size_t e = 0; e < epochs_.size() && static_cast<std::int64_t>(e) <= epoch; ++e) {
    for (const EpochSegment& segment : epochs_[e]) {
      if (static_cast<std::int64_t>(e) == epoch && segment.from_step >= step) break;
      flat.push_back(static_cast<std::int64_t>(e));
      if (segment.from_step > 0) flat.push_back(-segment.from_step);
      flat.push_back(static_cast<std::int64_t>(segment.members.size()));
      for (const int r : segment.members) flat.push_back(r);
    }
  }
  return flat;
}

std::vector<int> last_members(const std::vector<std::int64_t>& history) {
  std::vector<std::vector<EpochSegment>> epochs;
  for (std::size_t i = 0; i < history.size();) i = read_history_entry(history, i, epochs);
  for (auto e = epochs.rbegin(); e != epochs.rend(); ++e) {
    if (!e->empty()) return e->back().members;
  }
  return {};
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
