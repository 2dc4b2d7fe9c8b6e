#include "scheduler/kv_store.h"

#include <algorithm>

#include "common/base/errors.h"

namespace pstrain {

std::optional<KvStore::Answer> KvStore::get(const std::string& key,
                                            const std::function<std::string()>& live_workers) {
  if (key == kLiveWorkersKey) return Answer{live_workers(), false};  // the live set now, every time (not stored)
  auto it = values_.find(key);
  if (it != values_.end()) return Answer{it->second, false};
  if (key.starts_with(kEpochMembersPrefix)) {  // answered even when the store is full
    // The first ask for an epoch's workers fixes them: the live ones now
    // (worker/train/epoch_members.h). Every later ask gets the same answer.
    it = values_.emplace(key, live_workers()).first;
    return Answer{it->second, true};
  }
  return std::nullopt;
}

void KvStore::park(const PeerId& from, const Header& request, const std::string& key, TimePoint now) {
  const std::int64_t wait_ms = request.aux > 0 ? std::min<std::int64_t>(request.aux, timeout_ms_) : timeout_ms_;
  parked_.push_back(ParkedGet{from, request, key, wait_ms, now + std::chrono::milliseconds(wait_ms)});
}

void KvStore::check_set(const std::string& key) const {
  if (key == kLiveWorkersKey) {
    throw ProtocolError("store set of key '" + key + "': a key the scheduler answers itself");
  }
  if (values_.size() >= kMaxStoreEntries && values_.count(key) == 0) {
    throw ProtocolError("store set of key '" + key + "': the store is full (" + std::to_string(kMaxStoreEntries) +
                        " keys)");
  }
}

std::vector<KvStore::ParkedGet> KvStore::set(const std::string& key, std::string value) {
  std::vector<ParkedGet> waiting;
  for (auto it = parked_.begin(); it != parked_.end();) {
    if (it->key != key) {
      ++it;
      continue;
    }
    waiting.push_back(std::move(*it));
    it = parked_.erase(it);
  }
  values_[key] = std::move(value);
  return waiting;
}

std::vector<KvStore::ParkedGet> KvStore::expire(TimePoint now) {
  std::vector<ParkedGet> expired;
  for (auto it = parked_.begin(); it != parked_.end();) {
    if (it->deadline > now) {
      ++it;
      continue;
    }
    expired.push_back(std::move(*it));
    it = parked_.erase(it);
  }
  return expired;
}

std::string KvStore::expiry_reason(const ParkedGet& get) {
  return "store get of key '" + get.key + "' from " + std::string(to_string(get.request.role)) + " " +
         std::to_string(get.request.sender) + ": no node set it within " + std::to_string(get.wait_ms) + " ms";
}

}  // namespace pstrain
