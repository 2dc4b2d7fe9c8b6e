#include "worker/nn/cuda/copy_stream.h"

#include <cuda_runtime_api.h>

#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "common/base/errors.h"
#include "worker/nn/cuda/bf16_convert.h"
#include "worker/nn/cuda/cuda_backend.h"
#include "worker/nn/cuda/cuda_check.h"

namespace pstrain::nn::cuda {

namespace {

class CudaCopyEngine final : public CopyEngine {
 public:
  CudaCopyEngine(CudaBackend& backend, TraceRecorder* trace);
  ~CudaCopyEngine() override;

  std::string_view kind() const override { return "cuda copy stream"; }
  Event download(void* host_dst, const void* device_src, std::size_t num_bytes, std::int64_t chunk) override {
    return enqueue_with(chunk, num_bytes, Direction::kDownload,
                        [&] { memcpy_async(host_dst, device_src, num_bytes, chunk, Direction::kDownload); });
  }
  Event upload(void* device_dst, const void* host_src, std::size_t num_bytes, std::int64_t chunk) override {
    return enqueue_with(chunk, num_bytes, Direction::kUpload,
                        [&] { memcpy_async(device_dst, host_src, num_bytes, chunk, Direction::kUpload); });
  }
  void prepare_bfloat16(std::size_t flat_elems) override;
  Event download_narrowed(std::uint16_t* host_flat, const float* device_flat, std::size_t offset, std::size_t num_elems,
                          std::int64_t chunk) override;
  Event upload_widened(float* device_flat, const std::uint16_t* host_flat, std::size_t offset, std::size_t num_elems,
                       std::int64_t chunk) override;
  bool done(Event event) override;
  void wait(Event event) override;
  void order_compute_after(Event event) override;
  void register_host(void* ptr, std::size_t num_bytes) override;

 private:
  struct InFlight {
    Event id;
    cudaEvent_t start;  // timing (traced runs only)
    cudaEvent_t end;
    std::int64_t chunk;
    std::size_t num_bytes;
    Direction direction;
  };
  // Enqueues on the copy stream, after the training stream's queued work:
  // `body` (copies, conversion kernels), then the completion event.
  template <class Body>
  Event enqueue_with(std::int64_t chunk, std::size_t num_bytes, Direction direction, Body&& body);
  void memcpy_async(void* dst, const void* src, std::size_t num_bytes, std::int64_t chunk, Direction direction);
  void check_staging(std::size_t offset, std::size_t num_elems, std::int64_t chunk) const;
  cudaEvent_t take_event();
  void retire_completed_locked();     // pops the copies whose events completed, in order
  const InFlight* find_locked(Event event) const;
  void trace_locked(const InFlight& copy);

  CudaBackend& backend_;
  TraceRecorder* trace_;
  std::uint32_t track_ = 0;
  cudaStream_t copy_stream_ = nullptr;
  cudaEvent_t base_ = nullptr;  // traced: the copy stream's time zero
  std::int64_t base_us_ = 0;
  std::mutex mutex_;
  std::deque<InFlight> in_flight_;
  std::vector<cudaEvent_t> free_events_;
  Event enqueued_ = 0;
  Event completed_ = 0;
  std::vector<void*> registered_;
  // bfloat16 conversions: device staging, one element per flat element
  // (each chunk at its own offset, so chunks in flight never share it).
  std::uint16_t* staging_down_ = nullptr;  // narrowed gradients, downloaded from here
  std::uint16_t* staging_up_ = nullptr;    // uploaded weights, widened from here
  std::size_t staging_elems_ = 0;
};

CudaCopyEngine::CudaCopyEngine(CudaBackend& backend, TraceRecorder* trace)
    : backend_(backend), trace_(trace != nullptr && trace->enabled(TraceLevel::kAll) ? trace : nullptr) {
  check_cuda(cudaSetDevice(backend.device_index()), "copy stream: cudaSetDevice");
  check_cuda(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking), "copy stream: cudaStreamCreateWithFlags");
  if (trace_ != nullptr) {
    track_ = trace_->track("copy stream");
    check_cuda(cudaEventCreate(&base_), "copy stream: cudaEventCreate");
    check_cuda(cudaEventRecord(base_, copy_stream_), "copy stream: cudaEventRecord");
    check_cuda(cudaEventSynchronize(base_), "copy stream: cudaEventSynchronize");
    base_us_ = trace_->now_us();
  }
}

CudaCopyEngine::~CudaCopyEngine() {
  cudaSetDevice(backend_.device_index());
  cudaStreamSynchronize(copy_stream_);
  {
    std::lock_guard lock(mutex_);
    retire_completed_locked();
  }
  for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
  if (base_ != nullptr) cudaEventDestroy(base_);
  for (void* p : registered_) cudaHostUnregister(p);
  if (staging_down_ != nullptr) cudaFree(staging_down_);
  if (staging_up_ != nullptr) cudaFree(staging_up_);
  cudaStreamDestroy(copy_stream_);
}

cudaEvent_t CudaCopyEngine::take_event() {
  if (!free_events_.empty()) {
    cudaEvent_t e = free_events_.back();
    free_events_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  check_cuda(cudaEventCreateWithFlags(&e, trace_ != nullptr ? cudaEventDefault : cudaEventDisableTiming),
             "copy stream: cudaEventCreateWithFlags");
  return e;
}

template <class Body>
CopyEngine::Event CudaCopyEngine::enqueue_with(std::int64_t chunk, std::size_t num_bytes, Direction direction,
                                               Body&& body) {
  std::lock_guard lock(mutex_);
  check_cuda(cudaSetDevice(backend_.device_index()), "copy stream: cudaSetDevice");
  retire_completed_locked();
  // After the work queued on the training stream so far (a layer's backward; the last reads of old weights).
  cudaEvent_t after = take_event();
  check_cuda(cudaEventRecord(after, backend_.stream()), "copy stream: cudaEventRecord on the training stream");
  check_cuda(cudaStreamWaitEvent(copy_stream_, after, 0), "copy stream: cudaStreamWaitEvent");
  free_events_.push_back(after);  // recording it again later is safe: the wait captured this record
  InFlight copy{++enqueued_, nullptr, take_event(), chunk, num_bytes, direction};
  if (trace_ != nullptr) {
    copy.start = take_event();
    check_cuda(cudaEventRecord(copy.start, copy_stream_), "copy stream: cudaEventRecord");
  }
  body();
  check_cuda(cudaEventRecord(copy.end, copy_stream_), "copy stream: cudaEventRecord");
  in_flight_.push_back(copy);
  return copy.id;
}

void CudaCopyEngine::memcpy_async(void* dst, const void* src, std::size_t num_bytes, std::int64_t chunk,
                                  Direction direction) {
  const cudaMemcpyKind kind = direction == Direction::kDownload ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice;
  check_cuda(cudaMemcpyAsync(dst, src, num_bytes, kind, copy_stream_),
             std::string(direction == Direction::kDownload ? "download" : "upload") + " of chunk " +
                 std::to_string(chunk) + ": cudaMemcpyAsync");
}

void CudaCopyEngine::prepare_bfloat16(std::size_t flat_elems) {
  std::lock_guard lock(mutex_);
  if (staging_elems_ != 0 || flat_elems == 0) {
    if (flat_elems == staging_elems_) return;
    throw ComputeError("copy stream: prepare_bfloat16(" + std::to_string(flat_elems) + ") after prepare_bfloat16(" +
                       std::to_string(staging_elems_) + ")");
  }
  check_cuda(cudaSetDevice(backend_.device_index()), "copy stream: cudaSetDevice");
  const std::size_t bytes = flat_elems * sizeof(std::uint16_t);
  check_cuda(cudaMalloc(reinterpret_cast<void**>(&staging_down_), bytes), "copy stream: bfloat16 staging cudaMalloc");
  check_cuda(cudaMalloc(reinterpret_cast<void**>(&staging_up_), bytes), "copy stream: bfloat16 staging cudaMalloc");
  staging_elems_ = flat_elems;
}

void CudaCopyEngine::check_staging(std::size_t offset, std::size_t num_elems, std::int64_t chunk) const {
  if (offset + num_elems > staging_elems_) {
    throw ComputeError("copy stream: bfloat16 conversion of chunk " + std::to_string(chunk) + " (elements [" +
                       std::to_string(offset) + ", " + std::to_string(offset + num_elems) + ")) beyond the " +
                       std::to_string(staging_elems_) + " prepared (call prepare_bfloat16 with the flat size first)");
  }
}

// Narrowed on the copy stream into device staging, then only the bfloat16 bytes cross PCIe.
CopyEngine::Event CudaCopyEngine::download_narrowed(std::uint16_t* host_flat, const float* device_flat,
                                                    std::size_t offset, std::size_t num_elems, std::int64_t chunk) {
  check_staging(offset, num_elems, chunk);
  const std::size_t bytes = num_elems * sizeof(std::uint16_t);
  return enqueue_with(chunk, bytes, Direction::kDownload, [&] {
    narrow_to_bfloat16_on(copy_stream_, device_flat + offset, staging_down_ + offset, num_elems);
    memcpy_async(host_flat + offset, staging_down_ + offset, bytes, chunk, Direction::kDownload);
  });
}

// The bfloat16 bytes cross PCIe into device staging, then are widened into the weights on the copy stream.
CopyEngine::Event CudaCopyEngine::upload_widened(float* device_flat, const std::uint16_t* host_flat,
                                                 std::size_t offset, std::size_t num_elems, std::int64_t chunk) {
  check_staging(offset, num_elems, chunk);
  const std::size_t bytes = num_elems * sizeof(std::uint16_t);
  return enqueue_with(chunk, bytes, Direction::kUpload, [&] {
    memcpy_async(staging_up_ + offset, host_flat + offset, bytes, chunk, Direction::kUpload);
    widen_from_bfloat16_on(copy_stream_, staging_up_ + offset, device_flat + offset, num_elems);
  });
}

void CudaCopyEngine::retire_completed_locked() {
  while (!in_flight_.empty()) {
    const InFlight& front = in_flight_.front();
    const cudaError_t status = cudaEventQuery(front.end);
    if (status == cudaErrorNotReady) return;
    check_cuda(status, "copy of chunk " + std::to_string(front.chunk) + ": cudaEventQuery");
    if (trace_ != nullptr) trace_locked(front);
    completed_ = front.id;
    free_events_.push_back(front.end);
    if (front.start != nullptr) free_events_.push_back(front.start);
    in_flight_.pop_front();
  }
}

const CudaCopyEngine::InFlight* CudaCopyEngine::find_locked(Event event) const {
  for (const InFlight& c : in_flight_) {
    if (c.id == event) return &c;
  }
  return nullptr;
}

void CudaCopyEngine::trace_locked(const InFlight& copy) {
  float start_ms = 0.0f, end_ms = 0.0f;
  if (cudaEventElapsedTime(&start_ms, base_, copy.start) != cudaSuccess ||
      cudaEventElapsedTime(&end_ms, base_, copy.end) != cudaSuccess) {
    return;  // a span lost, not the run
  }
  const auto ts = base_us_ + static_cast<std::int64_t>(1000.0 * start_ms);
  const auto dur = static_cast<std::int64_t>(1000.0 * (end_ms - start_ms));
  trace_->record(track_, copy.direction == Direction::kDownload ? "download" : "upload", "copy", ts,
                 dur > 0 ? dur : 0, {{"chunk", copy.chunk}, {"bytes", static_cast<std::int64_t>(copy.num_bytes)}});
}

bool CudaCopyEngine::done(Event event) {
  std::lock_guard lock(mutex_);
  retire_completed_locked();
  return event <= completed_;
}

void CudaCopyEngine::wait(Event event) {
  cudaEvent_t end = nullptr;
  {
    std::lock_guard lock(mutex_);
    retire_completed_locked();
    if (event <= completed_) return;
    const InFlight* copy = find_locked(event);
    if (copy == nullptr) throw ComputeError("copy stream: wait on unknown event " + std::to_string(event));
    end = copy->end;
  }
  // Recycled only once retired (complete); if that happened meanwhile and it was
  // recorded again, this waits longer than needed, never too little.
  check_cuda(cudaEventSynchronize(end), "copy stream: cudaEventSynchronize");
  std::lock_guard lock(mutex_);
  retire_completed_locked();
}

void CudaCopyEngine::order_compute_after(Event event) {
  std::lock_guard lock(mutex_);
  retire_completed_locked();
  if (event <= completed_) return;
  const InFlight* copy = find_locked(event);
  if (copy == nullptr) throw ComputeError("copy stream: order after unknown event " + std::to_string(event));
  check_cuda(cudaStreamWaitEvent(backend_.stream(), copy->end, 0), "copy stream: cudaStreamWaitEvent (training)");
}

void CudaCopyEngine::register_host(void* ptr, std::size_t num_bytes) {
  if (ptr == nullptr || num_bytes == 0) return;
  std::lock_guard lock(mutex_);
  check_cuda(cudaSetDevice(backend_.device_index()), "copy stream: cudaSetDevice");
  if (cudaHostRegister(ptr, num_bytes, cudaHostRegisterDefault) == cudaSuccess) {
    registered_.push_back(ptr);
  } else {
    (void)cudaGetLastError();  // stays pageable: the copies are staged by the driver
  }
}

}  // namespace

std::unique_ptr<CopyEngine> make_cuda_copy_engine(Backend& backend, TraceRecorder* trace) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  if (cuda == nullptr) throw ComputeError("make_cuda_copy_engine: backend " + backend.name() + " is not CUDA");
  return std::make_unique<CudaCopyEngine>(*cuda, trace);
}

}  // namespace pstrain::nn::cuda
