// The scheduler's liveness rules: when to heartbeat the nodes, and which
// node has failed by silence. Pure: no sockets, no clock of its own (time is
// passed in); the scheduler applies the failure policy to what it finds.
//  - The scheduler heartbeats every node still in the job each
//    heartbeat_interval_ms (the first at once).
//  - A node still in the job (not done, not dropped) is silent, hence
//    failed, when nothing was heard from it for more than
//    heartbeat_timeout_ms: exactly the timeout is still alive.
//  - A restarting server (on_server_failure "restart") is not expected to
//    speak; it has failed for good when its restart deadline has passed
//    with no rejoin (exactly at the deadline it may still come).
//  - The scheduler scans its nodes for silence (and its store for expired
//    gets) once a scan tick (scan_due: the heartbeat interval, at most
//    10 ms), not after every message: a step's messages then cost O(1) each
//    however many nodes there are, and a silence is noticed at most a tick
//    later.
// Owned by the scheduler's thread (scheduler/scheduler.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

#include "scheduler/membership.h"

namespace pstrain {

class Liveness {
 public:
  using TimePoint = SchedulerClock::time_point;
  struct Lapse {
    enum Kind {
      kNone,     // alive, or not expected to speak
      kSilent,   // no heartbeat within heartbeat_timeout_ms
      kNotBack,  // a restarting server's deadline passed
    };
    Kind kind = kNone;
    std::int64_t silent_ms = 0;  // kSilent: how long (ms) it was silent
  };

  Liveness(int heartbeat_interval_ms, int heartbeat_timeout_ms)
      : interval_(heartbeat_interval_ms), timeout_ms_(heartbeat_timeout_ms) {}

  // Whether the nodes are due a heartbeat at `now`; if so, records it sent.
  bool heartbeat_due(TimePoint now);
  // How long the scheduler may wait for a message before it checks liveness
  // again: the heartbeat interval, at most 200 ms.
  std::chrono::milliseconds poll_interval() const;
  // Whether a scan of the nodes is due at `now` (the first at once, then one
  // a scan_tick()); if so, records it done.
  bool scan_due(TimePoint now);
  // The heartbeat interval, at most 10 ms.
  std::chrono::milliseconds scan_tick() const;
  // Whether node `m` has failed at `now`.
  Lapse check(const Member& m, TimePoint now) const;
  int timeout_ms() const { return timeout_ms_; }

 private:
  std::chrono::milliseconds interval_;
  int timeout_ms_;
  TimePoint last_sent_{};
  std::optional<TimePoint> last_scan_;
};

}  // namespace pstrain
