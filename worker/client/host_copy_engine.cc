#include "worker/client/host_copy_engine.h"

#include <cstring>
#include <span>

#include "common/base/bfloat16.h"

namespace pstrain {

HostCopyEngine::HostCopyEngine(TraceRecorder* trace)
    : trace_(trace != nullptr && trace->enabled(TraceLevel::kAll) ? trace : nullptr) {
  if (trace_ != nullptr) track_ = trace_->track("copy stream");
  thread_ = std::thread([this] { loop(); });
}

HostCopyEngine::~HostCopyEngine() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  work_.notify_all();
  thread_.join();
}

nn::CopyEngine::Event HostCopyEngine::download(void* host_dst, const void* device_src, std::size_t num_bytes,
                                               std::int64_t chunk) {
  return enqueue(Copy{host_dst, device_src, num_bytes, chunk, Direction::kDownload});
}

nn::CopyEngine::Event HostCopyEngine::upload(void* device_dst, const void* host_src, std::size_t num_bytes,
                                             std::int64_t chunk) {
  return enqueue(Copy{device_dst, host_src, num_bytes, chunk, Direction::kUpload});
}

nn::CopyEngine::Event HostCopyEngine::download_narrowed(std::uint16_t* host_flat, const float* device_flat,
                                                        std::size_t offset, std::size_t num_elems, std::int64_t chunk) {
  return enqueue(Copy{host_flat + offset, device_flat + offset, num_elems * sizeof(std::uint16_t), chunk,
                      Direction::kDownload, Convert::kNarrow, num_elems});
}

nn::CopyEngine::Event HostCopyEngine::upload_widened(float* device_flat, const std::uint16_t* host_flat,
                                                     std::size_t offset, std::size_t num_elems, std::int64_t chunk) {
  return enqueue(Copy{device_flat + offset, host_flat + offset, num_elems * sizeof(std::uint16_t), chunk,
                      Direction::kUpload, Convert::kWiden, num_elems});
}

void HostCopyEngine::run(const Copy& copy) {
  switch (copy.convert) {
    case Convert::kNone:
      if (copy.num_bytes > 0) std::memcpy(copy.dst, copy.src, copy.num_bytes);
      return;
    case Convert::kNarrow:
      to_bfloat16(std::span<const float>(static_cast<const float*>(copy.src), copy.num_elems),
                  std::span<std::uint16_t>(static_cast<std::uint16_t*>(copy.dst), copy.num_elems));
      return;
    case Convert::kWiden:
      from_bfloat16(std::span<const std::uint16_t>(static_cast<const std::uint16_t*>(copy.src), copy.num_elems),
                    std::span<float>(static_cast<float*>(copy.dst), copy.num_elems));
      return;
  }
}

nn::CopyEngine::Event HostCopyEngine::enqueue(const Copy& copy) {
  Event event = 0;
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(copy);
    event = ++enqueued_;
  }
  work_.notify_one();
  return event;
}

bool HostCopyEngine::done(Event event) {
  std::lock_guard lock(mutex_);
  return event <= completed_;
}

void HostCopyEngine::wait(Event event) {
  std::unique_lock lock(mutex_);
  completed_cv_.wait(lock, [&] { return event <= completed_; });
}

void HostCopyEngine::loop() {
  std::unique_lock lock(mutex_);
  while (true) {
    // The destructor lets the copies already enqueued finish: a waiter on one never hangs.
    work_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;
    const Copy copy = queue_.front();
    queue_.pop_front();
    lock.unlock();
    const std::int64_t start_us = trace_ != nullptr ? trace_->now_us() : 0;
    run(copy);
    if (trace_ != nullptr) trace_copy(copy, start_us);
    lock.lock();
    ++completed_;
    completed_cv_.notify_all();
  }
}

void HostCopyEngine::trace_copy(const Copy& copy, std::int64_t start_us) {
  const std::int64_t end_us = trace_->now_us();
  trace_->record(track_, copy.direction == Direction::kDownload ? "download" : "upload", "copy", start_us,
                 end_us > start_us ? end_us - start_us : 0,
                 {{"chunk", copy.chunk}, {"bytes", static_cast<std::int64_t>(copy.num_bytes)}});
}

}  // namespace pstrain
