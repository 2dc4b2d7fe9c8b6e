#include "scheduler/liveness.h"

#include <algorithm>

namespace pstrain {

using std::chrono::milliseconds;

bool Liveness::heartbeat_due(TimePoint now) {
  if (now - last_sent_ < interval_) return false;
  last_sent_ = now;
  return true;
}

milliseconds Liveness::poll_interval() const {
  return milliseconds(std::min<std::int64_t>(200, interval_.count()));
}

bool Liveness::scan_due(TimePoint now) {
  if (last_scan_ && now - *last_scan_ < scan_tick()) return false;
  last_scan_ = now;
  return true;
}

milliseconds Liveness::scan_tick() const { return milliseconds(std::min<std::int64_t>(10, interval_.count())); }

Liveness::Lapse Liveness::check(const Member& m, TimePoint now) const {
  if (m.done || m.dropped) return {};
  if (m.restarting) return now > m.restart_deadline ? Lapse{Lapse::kNotBack, 0} : Lapse{};
  const auto silent = std::chrono::duration_cast<milliseconds>(now - m.last_seen).count();
  if (silent > timeout_ms_) return Lapse{Lapse::kSilent, silent};
  return {};
}

}  // namespace pstrain
