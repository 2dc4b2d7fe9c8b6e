// "Not yet: ask again until a deadline", written once. Every wait of a node
// that repeats something until it succeeds or a deadline passes goes through
// retry_until: a rejoin the scheduler refuses for now (SchedulerRefusal,
// retryable), a rejoined worker's first pull that a server does not know yet,
// an allreduce worker waiting for the scheduler to drop a failed peer, the
// checkpoint's wait for the servers' parts. While it waits it can watch the
// scheduler (watch_scheduler): an abort the scheduler sends, or a scheduler
// gone silent, ends the wait with that reason instead of at the deadline.
// The clock and the sleep can be injected (tests).
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

namespace pstrain {

class SchedulerClient;

using RetryClock = std::chrono::steady_clock;

// Whether an exception from an attempt means "not yet" (try again) rather
// than a failure.
using Retryable = std::function<bool(const std::exception&)>;

// Retryable for a SchedulerRefusal the scheduler marked retryable (Status
// kRetryLater); every other error is a failure.
bool retryable_refusal(const std::exception& e);

struct RetryOptions {
  std::chrono::milliseconds interval{200};  // between two attempts
  // Called before each wait; throws to end it with its reason (watch_scheduler).
  // Empty: nothing is watched.
  std::function<void()> watch;
  // Called before each wait that follows a retryable error, with that error
  // and how many came before it (0: the first): a log line.
  std::function<void(const std::exception& error, int earlier)> on_retry;
  // The clock and the sleep; empty: steady_clock::now and this_thread::sleep_for.
  std::function<RetryClock::time_point()> now;
  std::function<void(std::chrono::milliseconds)> sleep;
};

// The loop behind retry_until: `attempt` returns true when done, false for
// "not yet"; an exception `retryable` accepts is "not yet" too. Returns false
// when the deadline passed after a "not yet" false.
bool retry_loop(RetryClock::time_point deadline, const std::string& what, const Retryable& retryable,
                const std::function<bool()>& attempt, const RetryOptions& options);

// Calls `attempt` (returning std::optional<T>) until it gives a value; a
// nullopt, or an exception that `retryable` accepts, means "not yet": then,
// unless the deadline has passed, options.watch(), a wait of
// options.interval, and the next attempt. It ends with:
//   - the value;
//   - an exception `retryable` rejects, or one from the watch: propagated unchanged;
//   - the deadline passed after a retryable exception: TransportError
//     "WHAT: ERROR" (with `what` empty: that exception itself, rethrown);
//   - the deadline passed after a nullopt: nullopt.
// The first attempt is made whatever the deadline.
template <class Attempt>
auto retry_until(RetryClock::time_point deadline, const std::string& what, const Retryable& retryable,
                 Attempt&& attempt, const RetryOptions& options = {}) -> std::invoke_result_t<Attempt&> {
  std::invoke_result_t<Attempt&> result;
  retry_loop(deadline, what, retryable, [&] { return (result = attempt()).has_value(); }, options);
  return result;
}

// A watch for RetryOptions::watch: handles what the scheduler sent (an
// abort throws AbortedError; a shutdown throws AbortedError "the scheduler
// ended the job while DOING") and throws TransportError when the scheduler
// has been silent for heartbeat_timeout_ms (check_scheduler_alive). The
// client must outlive the watch.
std::function<void()> watch_scheduler(SchedulerClient& scheduler, std::string doing);

}  // namespace pstrain
