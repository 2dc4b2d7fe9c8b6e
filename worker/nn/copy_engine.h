// A copy engine: the "copy stream" between a backend's memory and the host
// that the parameter-server worker's copy pipeline (worker/client/copy_pipeline.h)
// moves gradients out and weights in with, apart from the training stream.
//
// Semantics (the same on every implementation):
// - Copies run one after another in the order they were enqueued (a stream).
// - download() and upload() are ordered after everything the training stream
//   has queued before the call (CUDA: an event recorded on the backend's
//   stream that the copy stream waits on; on the host the backend's work is
//   done when the call is made), so a download reads a layer's gradient only
//   after its backward kernels, and an upload overwrites weights only after
//   the kernels that read the old ones.
// - Each returns an Event, numbered 1, 2, ... in enqueue order; an event is
//   complete when its copy and every copy before it have completed.
// - done() asks without blocking; wait() blocks the calling thread;
//   order_compute_after() makes the training stream wait for the event (CUDA:
//   cudaStreamWaitEvent, the host does not block; on the host: wait()).
// - Spans (level "all"): one per copy, "download" / "upload" with the chunk,
//   on the trace track "copy stream".
// - bfloat16 on the wire (ps.wire_dtype = "bfloat16"): download_narrowed()
//   and upload_widened() convert on the engine, bit for bit
//   common/base/bfloat16.h (round to nearest, ties to even; widening exact).
//   CUDA: a kernel on the copy stream narrows into device staging before the
//   download, and widens from device staging after the upload, so only the
//   bfloat16 bytes cross PCIe; the host engine: its copy thread converts, so
//   neither the training nor the communication thread does. They work on
//   elements [offset, offset + num_elems) of whole flat buffers (each
//   argument is the buffer's start), after prepare_bfloat16(flat_elems).
// Thread use: every method may be called from any thread (an engine
// serializes its own calls). An upload enqueued from another thread than the
// one driving the backend is ordered after what that thread had queued then:
// the pipeline enqueues uploads only once the last reads of the old weights
// (the previous step's backward) are queued.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace pstrain::nn {

class CopyEngine {
 public:
  using Event = std::uint64_t;  // 0: no copy (always complete)
  enum class Direction { kDownload, kUpload };
  virtual ~CopyEngine() = default;

  virtual std::string_view kind() const = 0;  // "host copy thread", "cuda copy stream"
  // Device -> host (`chunk` labels the span).
  virtual Event download(void* host_dst, const void* device_src, std::size_t num_bytes, std::int64_t chunk) = 0;
  // Host -> device.
  virtual Event upload(void* device_dst, const void* host_src, std::size_t num_bytes, std::int64_t chunk) = 0;
  virtual bool done(Event event) = 0;
  virtual void wait(Event event) = 0;
  virtual void order_compute_after(Event event) = 0;
  // Page-locks host memory the copies read or write (CUDA: cudaHostRegister;
  // the host engine: nothing). The range stays registered until the engine is
  // destroyed; it must outlive the engine.
  virtual void register_host(void* ptr, std::size_t num_bytes) = 0;

  // Sizes the engine's conversion staging for flat buffers of `flat_elems`
  // (CUDA: two device buffers of bfloat16; the host engine: nothing). Call
  // once, before any conversion is enqueued.
  virtual void prepare_bfloat16(std::size_t flat_elems) = 0;
  // Device float32 -> host bfloat16, narrowed on the engine (`chunk` labels the span).
  virtual Event download_narrowed(std::uint16_t* host_flat, const float* device_flat, std::size_t offset,
                                  std::size_t num_elems, std::int64_t chunk) = 0;
  // Host bfloat16 -> device float32, widened on the engine.
  virtual Event upload_widened(float* device_flat, const std::uint16_t* host_flat, std::size_t offset,
                               std::size_t num_elems, std::int64_t chunk) = 0;
};

}  // namespace pstrain::nn
