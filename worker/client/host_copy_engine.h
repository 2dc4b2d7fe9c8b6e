// The copy engine of host-memory backends (the CPU backend): one copy thread
// runs the copies (memcpy) in enqueue order and marks each event complete
// as it finishes (nn::CopyEngine's semantics; worker/nn/copy_engine.h). The
// backend's work is synchronous, so "ordered after the training stream" holds
// when a copy is enqueued, and order_compute_after() is a wait on the host.
// Spans: "download" / "upload" per chunk on the trace track "copy stream".
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>

#include "common/observe/trace.h"
#include "worker/nn/copy_engine.h"

namespace pstrain {

class HostCopyEngine final : public nn::CopyEngine {
 public:
  explicit HostCopyEngine(TraceRecorder* trace = nullptr);
  ~HostCopyEngine() override;  // waits for the copies enqueued, then joins
  HostCopyEngine(const HostCopyEngine&) = delete;
  HostCopyEngine& operator=(const HostCopyEngine&) = delete;

  std::string_view kind() const override { return "host copy thread"; }
  Event download(void* host_dst, const void* device_src, std::size_t num_bytes, std::int64_t chunk) override;
  Event upload(void* device_dst, const void* host_src, std::size_t num_bytes, std::int64_t chunk) override;
  bool done(Event event) override;
  void wait(Event event) override;
  void order_compute_after(Event event) override { wait(event); }
  void register_host(void*, std::size_t) override {}

 private:
  struct Copy {
    void* dst;
    const void* src;
    std::size_t num_bytes;
    std::int64_t chunk;
    Direction direction;
  };
  Event enqueue(const Copy& copy);
  void loop();
  void trace_copy(const Copy& copy, std::int64_t start_us);

  TraceRecorder* trace_;
  std::uint32_t track_ = 0;
  std::mutex mutex_;
  std::condition_variable work_, completed_cv_;
  std::deque<Copy> queue_;
  Event enqueued_ = 0;
  Event completed_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace pstrain
