// The copy engine of host-memory backends (the CPU backend): one copy thread
// runs the copies (memcpy) in enqueue order and marks each event complete
// as it finishes (nn::CopyEngine's semantics; worker/nn/copy_engine.h). The
// backend's work is synchronous, so "ordered after the training stream" holds
// when a copy is enqueued, and order_compute_after() is a wait on the host.
// bfloat16 (download_narrowed, upload_widened): the copy thread converts
// (common/base/bfloat16.h), not the thread that enqueues.
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
  void prepare_bfloat16(std::size_t) override {}
  Event download_narrowed(std::uint16_t* host_flat, const float* device_flat, std::size_t offset, std::size_t num_elems,
                          std::int64_t chunk) override;
  Event upload_widened(float* device_flat, const std::uint16_t* host_flat, std::size_t offset, std::size_t num_elems,
                       std::int64_t chunk) override;

 private:
  enum class Convert { kNone, kNarrow, kWiden };
  struct Copy {
    void* dst;
    const void* src;
    std::size_t num_bytes;  // bytes on the host side (bfloat16: 2 an element, as the CUDA engine moves)
    std::int64_t chunk;
    Direction direction;
    Convert convert = Convert::kNone;
    std::size_t num_elems = 0;  // conversions
  };
  static void run(const Copy& copy);
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
