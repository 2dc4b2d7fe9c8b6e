// retry_until (common/node/retry.h): the one "not yet, ask again until a
// deadline" loop. A fake clock that the injected sleep advances makes every
// case deterministic: no real time passes.
#include <doctest/doctest.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "common/base/errors.h"
#include "common/node/retry.h"
#include "common/node/scheduler_client.h"

using namespace pstrain;
using std::chrono::milliseconds;

namespace {

// The clock starts at 0 and moves only when the loop sleeps.
struct FakeClock {
  RetryClock::time_point t{};
  std::vector<milliseconds> sleeps;
  RetryOptions options(milliseconds interval = milliseconds(100)) {
    RetryOptions o;
    o.interval = interval;
    o.now = [this] { return t; };
    o.sleep = [this](milliseconds d) {
      sleeps.push_back(d);
      t += d;
    };
    return o;
  }
  RetryClock::time_point at(int ms) const { return RetryClock::time_point{} + milliseconds(ms); }
};

const SchedulerRefusal kNotYet(Status::kRetryLater, "scheduler refused a request: worker 1 is alive (pid 7)");
const SchedulerRefusal kNever(Status::kRefused, "scheduler refused a request: the job has no worker rank 9");

}  // namespace

TEST_CASE("retry_until: retryable refusals are asked again until the attempt succeeds") {
  FakeClock clock;
  int calls = 0;
  std::vector<int> told;
  RetryOptions o = clock.options();
  o.on_retry = [&](const std::exception& e, int earlier) {
    CHECK(std::string(e.what()) == kNotYet.what());
    told.push_back(earlier);
  };
  const std::optional<int> v = retry_until(clock.at(1000), "", retryable_refusal, [&]() -> std::optional<int> {
    if (++calls < 4) throw kNotYet;
    return 42;
  }, o);
  CHECK(v == 42);
  CHECK(calls == 4);
  CHECK(told == std::vector<int>{0, 1, 2});
  CHECK(clock.sleeps == std::vector<milliseconds>(3, milliseconds(100)));
}

TEST_CASE("retry_until: a refusal for good ends it at once, unchanged") {
  FakeClock clock;
  int calls = 0;
  try {
    retry_until(clock.at(1000), "rejoin", retryable_refusal, [&]() -> std::optional<int> {
      ++calls;
      throw kNever;
    }, clock.options());
    FAIL("no exception");
  } catch (const SchedulerRefusal& e) {
    CHECK(e.status() == Status::kRefused);
    CHECK_FALSE(e.retryable());
    CHECK(std::string(e.what()) == kNever.what());
  }
  CHECK(calls == 1);
  CHECK(clock.sleeps.empty());
  // Another error type is not a refusal: never retried by retryable_refusal.
  CHECK_THROWS_AS(retry_until(clock.at(1000), "", retryable_refusal,
                              []() -> std::optional<int> { throw TransportError("connection reset"); }, clock.options()),
                  TransportError);
}

TEST_CASE("retry_until: past the deadline the last refusal is the error (as it was, or under WHAT)") {
  FakeClock clock;
  int calls = 0;
  const auto refuse = [&]() -> std::optional<int> {
    ++calls;
    throw kNotYet;
  };
  try {
    retry_until(clock.at(250), "", retryable_refusal, refuse, clock.options());
    FAIL("no exception");
  } catch (const SchedulerRefusal& e) {
    CHECK(e.retryable());  // the refusal itself, rethrown
  }
  CHECK(calls == 4);  // at 0, 100, 200 and 300 ms: the deadline (250 ms) had passed after the 4th
  clock = FakeClock{};
  CHECK_THROWS_WITH_AS(retry_until(clock.at(250), "rejoin: not taken back within 250 ms", retryable_refusal, refuse,
                                   clock.options()),
                       (std::string("rejoin: not taken back within 250 ms: ") + kNotYet.what()).c_str(),
                       TransportError);
}

TEST_CASE("retry_until: an attempt that answers 'not yet' (nullopt) gives nullopt at the deadline") {
  FakeClock clock;
  int calls = 0;
  const std::optional<bool> v = retry_until(clock.at(50), "", nullptr, [&]() -> std::optional<bool> {
    ++calls;
    return std::nullopt;
  }, clock.options(milliseconds(10)));
  CHECK_FALSE(v.has_value());
  CHECK(calls == 7);  // at 0, 10, ..., 60 ms: the deadline (50 ms) had passed after the 7th
  // The first attempt is made even past the deadline.
  clock = FakeClock{};
  clock.t = clock.at(500);
  CHECK(retry_until(clock.at(50), "", nullptr, [] { return std::optional(7); }, clock.options()) == 7);
}

TEST_CASE("retry_until: the scheduler failing mid-wait ends the wait with its reason, before the deadline") {
  FakeClock clock;
  int watched = 0;
  int calls = 0;
  RetryOptions o = clock.options();
  o.watch = [&] {  // as watch_scheduler: the scheduler's abort arrives during the 3rd wait
    if (++watched == 3) throw AbortedError("job aborted by the scheduler: worker 2 failed");
  };
  CHECK_THROWS_WITH_AS(retry_until(clock.at(60000), "", retryable_refusal, [&]() -> std::optional<int> {
    ++calls;
    throw kNotYet;
  }, o), "job aborted by the scheduler: worker 2 failed", AbortedError);
  CHECK(calls == 3);
  CHECK(clock.t == clock.at(200));  // two waits, then the watch before the third ended it
}
