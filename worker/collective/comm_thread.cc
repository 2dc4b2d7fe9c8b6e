#include "worker/collective/comm_thread.h"

namespace pstrain {

CommThread::CommThread() : thread_([this] { loop(); }) {}

CommThread::~CommThread() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
    jobs_.clear();
  }
  work_.notify_all();
  thread_.join();
}

void CommThread::rethrow_failure_locked() const {
  if (failure_) std::rethrow_exception(failure_);
}

void CommThread::submit(std::function<void()> job) {
  {
    std::lock_guard lock(mutex_);
    rethrow_failure_locked();
    jobs_.push_back(std::move(job));
  }
  work_.notify_one();
}

bool CommThread::wait_idle(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  const bool idle = idle_.wait_for(lock, timeout, [&] { return failure_ || (jobs_.empty() && !running_job_); });
  rethrow_failure_locked();
  return idle;
}

void CommThread::loop() {
  std::unique_lock lock(mutex_);
  while (true) {
    work_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
    if (stop_) return;
    std::function<void()> job = std::move(jobs_.front());
    jobs_.pop_front();
    running_job_ = true;
    lock.unlock();
    std::exception_ptr error;
    try {
      job();
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    running_job_ = false;
    if (error) {
      failure_ = error;
      jobs_.clear();
    }
    idle_.notify_all();
  }
}

}  // namespace pstrain
