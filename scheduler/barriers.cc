#include "scheduler/barriers.h"

#include <algorithm>

#include "common/base/errors.h"

namespace pstrain {

Barriers::Arrival Barriers::arrive(int rank, std::int64_t key, const std::string& name) {
  Numbering& numbering = numbering_[rank];
  if (numbering.realign) {
    numbering.realign = false;
    if (!name.empty() && name == last_released_ && open_.count(key) == 0) {
      numbering.shift -= 1;
      return Arrival::kPassed;
    }
  }
  const std::int64_t seq = key + numbering.shift;
  auto& arrived = open_[seq];
  names_.try_emplace(seq, name);
  if (std::find(arrived.begin(), arrived.end(), rank) != arrived.end()) {
    throw ProtocolError("worker " + std::to_string(rank) + " entered barrier " + std::to_string(seq) + " twice");
  }
  arrived.push_back(rank);
  return Arrival::kEntered;
}

std::vector<std::int64_t> Barriers::release(std::span<const int> in_job, int waited_for) {
  std::vector<std::int64_t> released;
  for (auto it = open_.begin(); it != open_.end();) {
    // Fewer arrivals than it waits for: not complete, whoever they are (no count:
    // this runs at every arrival, and counting them all made a barrier O(N^2)).
    if (it->second.size() < static_cast<std::size_t>(std::max(waited_for, 0))) {
      ++it;
      continue;
    }
    int arrived_live = 0;
    for (int rank : it->second) arrived_live += std::binary_search(in_job.begin(), in_job.end(), rank) ? 1 : 0;
    if (arrived_live < waited_for) {
      ++it;
      continue;
    }
    released.push_back(it->first);
    next_seq_ = std::max(next_seq_, it->first + 1);
    last_released_ = names_[it->first];
    names_.erase(it->first);
    it = open_.erase(it);
  }
  return released;
}

std::int64_t Barriers::key_for(int rank, std::int64_t seq) const {
  const auto it = numbering_.find(rank);
  return it == numbering_.end() ? seq : seq - it->second.shift;
}

std::vector<std::string> Barriers::rejoin(int rank) {
  numbering_[rank] = Numbering{0, true};
  std::vector<std::string> entered;
  for (auto& [seq, arrived] : open_) {
    if (std::erase(arrived, rank) > 0) entered.push_back(names_[seq]);
  }
  return entered;
}

std::vector<int> Barriers::arrived(std::int64_t seq) const {
  const auto it = open_.find(seq);
  return it == open_.end() ? std::vector<int>{} : it->second;
}

}  // namespace pstrain
