#include "worker/collective/scheduler_store.h"

#include <algorithm>
#include <limits>

namespace pstrain {

std::string SchedulerStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  const auto limit_ms = std::clamp<std::chrono::milliseconds::rep>(timeout.count(), 1, std::numeric_limits<int>::max());
  if (watch_) return client_.store_get(key, static_cast<int>(limit_ms), watch_);
  return client_.store_get(key, static_cast<int>(limit_ms));
}

}  // namespace pstrain
