#include "worker/nn/cuda/copy_stream.h"

#include <cuda_runtime_api.h>

#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "common/base/errors.h"
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
    return enqueue(host_dst, device_src, num_bytes, chunk, Direction::kDownload);
  }
  Event upload(void* device_dst, const void* host_src, std::size_t num_bytes, std::int64_t chunk) override {
    return enqueue(device_dst, host_src, num_bytes, chunk, Direction::kUpload);
  }
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
  Event enqueue(void* dst, const void* src, std::size_t num_bytes, std::int64_t chunk, Direction direction);
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

CopyEngine::Event CudaCopyEngine::enqueue(void* dst, const void* src, std::size_t num_bytes, std::int64_t chunk,
                                          Direction direction) {
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
  const cudaMemcpyKind kind = direction == Direction::kDownload ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice;
  check_cuda(cudaMemcpyAsync(dst, src, num_bytes, kind, copy_stream_),
             std::string(direction == Direction::kDownload ? "download" : "upload") + " of chunk " +
                 std::to_string(chunk) + ": cudaMemcpyAsync");
  check_cuda(cudaEventRecord(copy.end, copy_stream_), "copy stream: cudaEventRecord");
  in_flight_.push_back(copy);
  return copy.id;
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
