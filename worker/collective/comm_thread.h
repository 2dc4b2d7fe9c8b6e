// One background thread that runs jobs (communication operations) in the
// order they were submitted, so the owner can go on computing meanwhile.
// A job that throws stops the queue: the jobs after it are dropped, and
// submit() and wait_idle() rethrow that failure from then on.
// submit() and wait_idle() belong to one owner thread; the destructor waits
// for the running job (it does not interrupt it), drops the rest and joins.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace pstrain {

class CommThread {
 public:
  CommThread();
  ~CommThread();
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  void submit(std::function<void()> job);
  // True once every submitted job has run; false if some are still queued or
  // running after `timeout`.
  bool wait_idle(std::chrono::milliseconds timeout);

 private:
  void loop();
  void rethrow_failure_locked() const;

  std::mutex mutex_;
  std::condition_variable work_, idle_;
  std::deque<std::function<void()>> jobs_;
  bool running_job_ = false;
  bool stop_ = false;
  std::exception_ptr failure_;
  std::thread thread_;
};

}  // namespace pstrain
