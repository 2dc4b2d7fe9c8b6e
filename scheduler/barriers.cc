#include "scheduler/barriers.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <string_view>

#include "common/base/errors.h"
#include "common/wire/barrier_names.h"

namespace pstrain {

std::int64_t checkpoint_step_of(const std::string& name) {
  constexpr std::string_view prefix = "checkpoint ";
  std::int64_t n = -1;
  if (!name.starts_with(prefix)) return -1;
  const auto [end, ec] = std::from_chars(name.data() + prefix.size(), name.data() + name.size(), n);
  return ec == std::errc() && end == name.data() + name.size() ? n : -1;
}

Barriers::Arrival Barriers::arrive(int rank, std::int64_t key, const std::string& name) {
  if (rank < 0) throw ProtocolError("barrier from worker rank " + std::to_string(rank) + ": no such worker");
  std::int64_t shift = 0;
  if (const auto it = numbering_.find(rank); it != numbering_.end()) {
    Numbering& numbering = it->second;
    if (numbering.realign) {
      numbering.realign = false;
      if (!name.empty() && name == last_released_ && open_.count(key) == 0) {
        numbering.shift -= 1;
        if (name == kFinalBarrier) finished_.insert(rank);
        return Arrival::kPassed;
      }
    }
    shift = numbering.shift;
  }
  const std::int64_t seq = key + shift;
  Open& open = open_[seq];
  names_.try_emplace(seq, name);
  const auto r = static_cast<std::size_t>(rank);
  if (open.entered.size() <= r) open.entered.resize(std::max(r + 1, 2 * open.entered.size()), false);
  if (open.entered[r]) {
    throw ProtocolError("worker " + std::to_string(rank) + " entered barrier " + std::to_string(seq) + " twice");
  }
  open.entered[r] = true;
  open.arrived.push_back(rank);
  return Arrival::kEntered;
}

std::vector<std::int64_t> Barriers::release(std::span<const int> in_job, int waited_for) {
  std::vector<std::int64_t> released;
  for (auto it = open_.begin(); it != open_.end();) {
    const std::vector<int>& arrivals = it->second.arrived;
    // Fewer arrivals than it waits for: not complete, whoever they are (no count:
    // this runs at every arrival, and counting them all made a barrier O(N^2)).
    if (arrivals.size() < static_cast<std::size_t>(std::max(waited_for, 0))) {
      ++it;
      continue;
    }
    int arrived_live = 0;  // a done worker is not waited for: its arrival does not count either
    for (int rank : arrivals) {
      arrived_live += std::binary_search(in_job.begin(), in_job.end(), rank) && done_.count(rank) == 0 ? 1 : 0;
    }
    if (arrived_live < waited_for) {
      ++it;
      continue;
    }
    released.push_back(it->first);
    next_seq_ = std::max(next_seq_, it->first + 1);
    last_released_ = names_[it->first];
    checkpoint_released_ = std::max(checkpoint_released_, last_released_ == kFinalBarrier
                                                              ? std::numeric_limits<std::int64_t>::max()
                                                              : checkpoint_step_of(last_released_));
    if (last_released_ == kFinalBarrier) finished_.insert(arrivals.begin(), arrivals.end());
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
  finished_.erase(rank);  // a new process: not done, its done judged afresh
  done_.erase(rank);
  early_done_.erase(rank);
  std::vector<std::string> entered;
  for (auto& [seq, open] : open_) {
    if (std::erase(open.arrived, rank) == 0) continue;
    open.entered[static_cast<std::size_t>(rank)] = false;
    entered.push_back(names_[seq]);
  }
  return entered;
}

std::vector<int> Barriers::arrived(std::int64_t seq) const {
  const auto it = open_.find(seq);
  return it == open_.end() ? std::vector<int>{} : it->second.arrived;
}

void Barriers::done(int rank) {
  done_.insert(rank);
  if (!finished(rank)) early_done_.insert(rank);
}

std::optional<Barriers::Stranded> Barriers::stranded(std::span<const int> in_job) const {
  // Without an early done nothing is stranded: O(1) at every arrival (the scan below, with a linear
  // find per arrival, made each barrier O(N^3): a tenth of a 1,024-worker job's CPU).
  if (early_done_.empty()) return std::nullopt;
  const auto in = [&in_job](int rank) { return std::binary_search(in_job.begin(), in_job.end(), rank); };
  for (const auto& [seq, open] : open_) {
    const std::vector<int>& arrived = open.arrived;
    Stranded s;
    for (int rank : arrived) {
      if (in(rank) && done_.count(rank) == 0) s.waiting.push_back(rank);
    }
    if (s.waiting.empty()) continue;  // nobody in the job waits here yet
    for (int rank : early_done_) {
      if (!in(rank) || std::find(arrived.begin(), arrived.end(), rank) != arrived.end()) continue;
      std::sort(s.waiting.begin(), s.waiting.end());
      s.rank = rank;
      s.barrier = names_.at(seq);
      return s;
    }
  }
  return std::nullopt;
}

}  // namespace pstrain
