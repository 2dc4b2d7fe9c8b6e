// Elastic membership in the consistency policies (server/consistency.h):
// vacant slots and a worker joining one from an announced step.
#include <algorithm>
#include <string>

#include "common/base/errors.h"
#include "server/consistency.h"

namespace pstrain {

void ConsistencyPolicy::vacate(int worker) {
  mark_dropped(worker);
  if (!vacant_[static_cast<std::size_t>(worker)]) ++num_vacant_;
  vacant_[static_cast<std::size_t>(worker)] = true;
}

void ConsistencyPolicy::join_worker(int worker, std::int64_t start, std::span<const std::int64_t> versions) {
  const std::string what = "join of worker " + std::to_string(worker) + " at step " + std::to_string(start);
  // A slot never held, or a retired worker's (dropped here when it retired).
  if (worker < 0 || worker >= num_workers_ || live_[static_cast<std::size_t>(worker)]) {
    throw Error(what + ": not a vacant slot of the job's " + std::to_string(num_workers_));
  }
  if (versions.size() != last_step_.size()) throw Error(what + ": a version per chunk expected");
  for (std::size_t c = 0; c < last_step_.size(); ++c) {
    if (start < rejoin_floor(c, versions[c])) {
      throw Error(what + ": chunk " + std::to_string(c) + " is at step " +
                  std::to_string(rejoin_floor(c, versions[c])) + " already");
    }
  }
  if (vacant_[static_cast<std::size_t>(worker)]) --num_vacant_;
  vacant_[static_cast<std::size_t>(worker)] = false;
  live_[static_cast<std::size_t>(worker)] = true;
  ++num_live_;
  for (std::size_t c = 0; c < last_step_.size(); ++c) {
    std::int64_t& last = last_step_[c][static_cast<std::size_t>(worker)];
    last = std::max(last, start - 1);  // its clock: a step before its start passes over it (not partial)
  }
}

}  // namespace pstrain
