#include "worker/collective/in_process_store.h"

#include "common/base/errors.h"
#include "common/wire/protocol.h"

namespace pstrain {

void InProcessStore::set(const std::string& key, const std::string& value) {
  validate_store_entry(StoreEntry{key, value}, "store set");
  {
    std::lock_guard lock(mutex_);
    if (entries_.size() >= kMaxStoreEntries && entries_.count(key) == 0) {
      throw ProtocolError("store set of key '" + key + "': the store is full (" + std::to_string(kMaxStoreEntries) +
                          " keys)");
    }
    entries_[key] = value;
  }
  changed_.notify_all();
}

std::string InProcessStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  validate_store_entry(StoreEntry{key, {}}, "store get");
  std::unique_lock lock(mutex_);
  ++waiting_;
  const bool found = changed_.wait_for(lock, timeout, [&] { return entries_.count(key) != 0; });
  --waiting_;
  if (!found) {
    throw TimeoutError("store get of key '" + key + "': no rank set it within " + std::to_string(timeout.count()) +
                       " ms");
  }
  return entries_.at(key);
}

int InProcessStore::waiting() const {
  std::lock_guard lock(mutex_);
  return waiting_;
}

}  // namespace pstrain
