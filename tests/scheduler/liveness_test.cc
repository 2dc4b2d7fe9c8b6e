// scheduler/liveness.h without sockets or a clock: heartbeats due, silence
// at the timeout's edge, a restarting server's deadline.
#include <doctest/doctest.h>

#include <chrono>

#include "scheduler/liveness.h"

using namespace pstrain;
using std::chrono::milliseconds;

namespace {

const SchedulerClock::time_point kT0{std::chrono::seconds(1000)};

Member heard_at(SchedulerClock::time_point t) {
  Member m;
  m.last_seen = t;
  return m;
}

}  // namespace

TEST_CASE("liveness: a node heard exactly heartbeat_timeout_ms ago is alive; a millisecond later it is silent") {
  const Liveness live(100, 1000);
  const Member m = heard_at(kT0);
  CHECK(live.check(m, kT0 + milliseconds(1000)).kind == Liveness::Lapse::kNone);
  const auto lapse = live.check(m, kT0 + milliseconds(1001));
  CHECK(lapse.kind == Liveness::Lapse::kSilent);
  CHECK(lapse.silent_ms == 1001);
}

TEST_CASE("liveness: a done or dropped node is never silent") {
  const Liveness live(100, 1000);
  Member done = heard_at(kT0);
  done.done = true;
  Member dropped = heard_at(kT0);
  dropped.dropped = true;
  CHECK(live.check(done, kT0 + milliseconds(5000)).kind == Liveness::Lapse::kNone);
  CHECK(live.check(dropped, kT0 + milliseconds(5000)).kind == Liveness::Lapse::kNone);
}

TEST_CASE("liveness: a restarting server is not silent; it has failed for good past its deadline") {
  const Liveness live(100, 1000);
  Member s = heard_at(kT0);
  s.role = Role::kServer;
  s.restarting = true;
  s.restart_deadline = kT0 + milliseconds(3000);
  CHECK(live.check(s, kT0 + milliseconds(3000)).kind == Liveness::Lapse::kNone);
  CHECK(live.check(s, kT0 + milliseconds(3000) + std::chrono::nanoseconds(1)).kind == Liveness::Lapse::kNotBack);
}

TEST_CASE("liveness: heartbeats are due at once, then each interval") {
  Liveness live(100, 1000);
  CHECK(live.heartbeat_due(kT0));
  CHECK_FALSE(live.heartbeat_due(kT0));
  CHECK_FALSE(live.heartbeat_due(kT0 + milliseconds(99)));
  CHECK(live.heartbeat_due(kT0 + milliseconds(100)));
  CHECK_FALSE(live.heartbeat_due(kT0 + milliseconds(150)));
  CHECK(live.heartbeat_due(kT0 + milliseconds(200)));
}

TEST_CASE("liveness: the scheduler polls each heartbeat interval, at most 200 ms") {
  CHECK(Liveness(100, 1000).poll_interval() == milliseconds(100));
  CHECK(Liveness(500, 1000).poll_interval() == milliseconds(200));
}

TEST_CASE("liveness: the scan for silent nodes is due at once, then once a tick (the interval, at most 10 ms)") {
  CHECK(Liveness(500, 1000).scan_tick() == milliseconds(10));
  CHECK(Liveness(4, 1000).scan_tick() == milliseconds(4));
  Liveness live(500, 1000);
  CHECK(live.scan_due(kT0));
  CHECK_FALSE(live.scan_due(kT0));  // a second message at the same moment: no second scan
  CHECK_FALSE(live.scan_due(kT0 + milliseconds(9)));
  CHECK(live.scan_due(kT0 + milliseconds(10)));
  CHECK_FALSE(live.scan_due(kT0 + milliseconds(19)));
  CHECK(live.scan_due(kT0 + milliseconds(25)));
  CHECK_FALSE(live.scan_due(kT0 + milliseconds(34)));
  CHECK(live.scan_due(kT0 + milliseconds(35)));  // a tick after the last scan, not on a fixed grid
}
