#include "common/node/retry.h"

#include <thread>

#include "common/base/errors.h"
#include "common/node/scheduler_client.h"

namespace pstrain {

bool retryable_refusal(const std::exception& e) {
  const auto* refusal = dynamic_cast<const SchedulerRefusal*>(&e);
  return refusal != nullptr && refusal->retryable();
}

bool retry_loop(RetryClock::time_point deadline, const std::string& what, const Retryable& retryable,
                const std::function<bool()>& attempt, const RetryOptions& options) {
  const auto now = [&] { return options.now ? options.now() : RetryClock::now(); };
  for (int refused = 0;;) {
    std::exception_ptr error;
    try {
      if (attempt()) return true;
    } catch (const std::exception& e) {
      if (!retryable || !retryable(e)) throw;
      error = std::current_exception();
    }
    if (now() > deadline) {
      if (!error) return false;
      if (what.empty()) std::rethrow_exception(error);
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        throw TransportError(what + ": " + e.what());
      }
    }
    if (error && options.on_retry) {
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        options.on_retry(e, refused++);
      }
    }
    if (options.watch) options.watch();
    if (options.sleep) {
      options.sleep(options.interval);
    } else {
      std::this_thread::sleep_for(options.interval);
    }
  }
}

std::function<void()> watch_scheduler(SchedulerClient& scheduler, std::string doing) {
  return [&scheduler, doing = std::move(doing)] {
    if (scheduler.handle_incoming()) throw AbortedError("the scheduler ended the job while " + doing);
    scheduler.check_scheduler_alive();
  };
}

}  // namespace pstrain
