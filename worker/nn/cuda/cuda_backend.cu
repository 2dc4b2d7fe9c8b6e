// CudaBackend: device setup, memory, element-wise layers, pooling, softmax
// cross-entropy, optimizer steps, and make_cuda_backend. The GEMM layers
// (convolution, linear) are in cuda_gemm_layers.cu.
#include "worker/nn/cuda/cuda_backend.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>

#include "common/base/errors.h"
#include "worker/nn/cuda/arg_checks.h"
#include "worker/nn/cuda/cuda_check.h"
#if defined(PSTRAIN_HAVE_CUDNN)
#include "worker/nn/cuda/cudnn_conv.h"
#endif
#include "worker/nn/cuda/kernels.cuh"
#include "worker/nn/shape_checks.h"

namespace pstrain::nn {
namespace cuda {
namespace {

// Offsets of softmax_xent's pieces in its scratch block (each 256-byte aligned).
struct XentScratchLayout {
  std::size_t row_loss_offset, row_status_offset, num_bytes;
};

// cuBLAS's workspace, set by the backend (what cuBLAS takes by default on Hopper).
constexpr std::size_t kCublasWorkspaceBytes = std::size_t{32} << 20;

constexpr std::size_t align_up(std::size_t num_bytes) { return (num_bytes + 255) / 256 * 256; }

XentScratchLayout xent_scratch_layout(int n) {
  const std::size_t rows = static_cast<std::size_t>(n);
  const std::size_t row_loss_offset = align_up(sizeof(XentTotals));
  const std::size_t row_status_offset = row_loss_offset + align_up(rows * sizeof(float));
  return {row_loss_offset, row_status_offset, row_status_offset + rows * sizeof(std::int32_t)};
}

}  // namespace

void CudaBackend::StreamDeleter::operator()(cudaStream_t stream) const noexcept {
  static_cast<void>(cudaStreamDestroy(stream));
}

void CudaBackend::CublasDeleter::operator()(cublasHandle_t handle) const noexcept {
  static_cast<void>(cublasDestroy(handle));
}

void CudaBackend::CudnnDeleter::operator()(CudnnConv* conv) const noexcept {
#if defined(PSTRAIN_HAVE_CUDNN)
  delete conv;
#else
  static_cast<void>(conv);  // never made without cuDNN
#endif
}

CudaBackend::CudaBackend(int device_index, const ComputeOptions& options) : device_index_(device_index) {
  activate();
  cudaDeviceProp props{};
  check(cudaGetDeviceProperties(&props, device_index_), "cudaGetDeviceProperties");
  name_ = "cuda:" + std::to_string(device_index_) + " (" + props.name + ", sm_" + std::to_string(props.major) +
          std::to_string(props.minor);
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  stream_.reset(stream);
  cublasHandle_t handle = nullptr;
  check(cublasCreate(&handle), "cublasCreate");
  cublas_.reset(handle);
  check(cublasSetStream(handle, stream), "cublasSetStream");
  // Plain FP32 GEMMs (no TF32) unless asked, so results match the CPU reference closely.
  check(cublasSetMathMode(handle, options.tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH),
        "cublasSetMathMode");
  // cuBLAS allocates nothing of its own inside a step, so a step can be captured in a CUDA graph.
  void* cublas_workspace = cublas_workspace_.reserve(kCublasWorkspaceBytes, stream, "cuBLAS workspace");
  check(cublasSetWorkspace(handle, cublas_workspace, cublas_workspace_.capacity_bytes()), "cublasSetWorkspace");
  path_ = convolution_path(options, stream);
  path_.precision = options.tf32 ? "tf32" : "fp32";
  name_ += ", " + path_.detail + ", " + path_.precision + ")";
  // Probe: fails here (not mid-training) when the binary has no kernel image for this GPU.
  auto* probe = static_cast<float*>(xent_scratch_.reserve(sizeof(float), stream, "startup probe"));
  cuda::fill(probe, 0.0f, 1, stream);
  check(cudaStreamSynchronize(stream), "startup probe kernel");
}

ComputePath CudaBackend::convolution_path(const ComputeOptions& options, cudaStream_t stream) {
  const std::string own = "cuda-im2col";
#if defined(PSTRAIN_HAVE_CUDNN)
  if (!options.cudnn) return {own, "own conv kernels (cuDNN not asked for)", ""};
  const CudnnVersion version = cudnn_version();
  if (!version.usable()) return {own, "own conv kernels (" + version.text() + ": another major version)", ""};
  cudnn_.reset(new CudnnConv(stream, options.tf32 ? CudnnConv::Math::kTf32 : CudnnConv::Math::kFp32));
  return {"cudnn", "convolutions by " + version.text(), ""};
#else
  static_cast<void>(options);
  static_cast<void>(stream);
  return {own, "own conv kernels (built without cuDNN)", ""};
#endif
}

CudaBackend::~CudaBackend() {
  if (cudaSetDevice(device_index_) == cudaSuccess && stream_) {
    static_cast<void>(cudaStreamSynchronize(stream_.get()));
  }
}

void CudaBackend::activate() const { check(cudaSetDevice(device_index_), "cudaSetDevice"); }

void CudaBackend::check(cudaError_t status, std::string_view what) const {
  if (status != cudaSuccess) check_cuda(status, "cuda:" + std::to_string(device_index_) + " " + std::string(what));
}

void CudaBackend::check(cublasStatus_t status, std::string_view what) const {
  if (status != CUBLAS_STATUS_SUCCESS) {
    check_cublas(status, "cuda:" + std::to_string(device_index_) + " " + std::string(what));
  }
}

// ---- memory ----

void* CudaBackend::allocate(std::size_t num_bytes) {
  activate();
  void* ptr = nullptr;
  if (num_bytes == 0) return ptr;
  const cudaError_t status = cudaMalloc(&ptr, num_bytes);
  if (status != cudaSuccess) {
    static_cast<void>(cudaGetLastError());  // out-of-memory is not sticky; clear it
    check(status, "allocate of " + std::to_string(num_bytes) + " bytes: cudaMalloc");
  }
  return ptr;
}

void CudaBackend::deallocate(void* ptr) noexcept {
  if (ptr == nullptr || cudaSetDevice(device_index_) != cudaSuccess) return;
  static_cast<void>(cudaStreamSynchronize(stream_.get()));
  static_cast<void>(cudaFree(ptr));
}

void CudaBackend::copy_from_host(void* dst, const void* host_src, std::size_t num_bytes) {
  if (num_bytes == 0) return;
  activate();
  if (graphs_.capturing()) {  // the step's input: copied now, on a stream of its own, not captured
    if (!upload_stream_) {
      cudaStream_t upload = nullptr;
      check(cudaStreamCreateWithFlags(&upload, cudaStreamNonBlocking), "copy_from_host: cudaStreamCreateWithFlags");
      upload_stream_.reset(upload);
    }
    check(cudaMemcpyAsync(dst, host_src, num_bytes, cudaMemcpyHostToDevice, upload_stream_.get()),
          "copy_from_host (graph capture) of " + std::to_string(num_bytes) + " bytes: cudaMemcpyAsync");
    check(cudaStreamSynchronize(upload_stream_.get()), "copy_from_host (graph capture): cudaStreamSynchronize");
    return;
  }
  // Synchronous: the host buffer may be reused as soon as this returns.
  check(cudaMemcpyAsync(dst, host_src, num_bytes, cudaMemcpyHostToDevice, stream_.get()),
        "copy_from_host of " + std::to_string(num_bytes) + " bytes: cudaMemcpyAsync");
  check(cudaStreamSynchronize(stream_.get()), "copy_from_host: cudaStreamSynchronize");
}

void CudaBackend::copy_to_host(void* host_dst, const void* src, std::size_t num_bytes) {
  if (num_bytes == 0) return;
  if (graphs_.active()) {
    throw ComputeError("copy_to_host of " + std::to_string(num_bytes) + " bytes inside a CUDA graph step: results "
                       "are on the device only after end_graph_step");
  }
  activate();
  check(cudaMemcpyAsync(host_dst, src, num_bytes, cudaMemcpyDeviceToHost, stream_.get()),
        "copy_to_host of " + std::to_string(num_bytes) + " bytes: cudaMemcpyAsync");
  check(cudaStreamSynchronize(stream_.get()), "copy_to_host: cudaStreamSynchronize");
}

void CudaBackend::copy(void* dst, const void* src, std::size_t num_bytes) {
  if (num_bytes == 0 || graphs_.replaying()) return;
  activate();
  check(cudaMemcpyAsync(dst, src, num_bytes, cudaMemcpyDeviceToDevice, stream_.get()),
        "copy of " + std::to_string(num_bytes) + " bytes: cudaMemcpyAsync");
}

void CudaBackend::fill(float* x, float value, std::size_t num_elems) {
  if (graphs_.replaying()) return;
  activate();
  cuda::fill(x, value, num_elems, stream_.get());
}

void CudaBackend::synchronize() {
  if (graphs_.active()) return;  // a graph step's work runs at end_graph_step, which waits for it
  activate();
  check(cudaStreamSynchronize(stream_.get()), "synchronize: cudaStreamSynchronize");
}

// ---- element-wise layers and pooling ----

void CudaBackend::relu_forward(const float* x, float* y, std::size_t num_elems) {
  if (graphs_.replaying()) return;
  activate();
  cuda::relu_forward(y, x, num_elems, stream_.get());
}

void CudaBackend::relu_backward(const float* y, const float* dy, float* dx, std::size_t num_elems) {
  if (graphs_.replaying()) return;
  activate();
  cuda::relu_backward(dx, y, dy, num_elems, stream_.get());
}

void CudaBackend::maxpool_forward(const PoolShape& s, const float* x, float* y, std::int32_t* argmax) {
  check_shape(s, "maxpool_forward");
  if (graphs_.replaying()) return;
  activate();
  cuda::maxpool_forward(y, argmax, x, s, stream_.get());
}

void CudaBackend::maxpool_backward(const PoolShape& s, const float* dy, const std::int32_t* argmax,
                                   float* dx) {
  check_shape(s, "maxpool_backward");
  if (graphs_.replaying()) return;
  activate();
  cuda::maxpool_backward(dx, dy, argmax, s, stream_.get());
}

void CudaBackend::dropout_forward(const float* x, float* y, float* mask, std::size_t num_elems, float p,
                                  std::uint64_t seed) {
  check_dropout_p(p, "dropout_forward");
  if (graphs_.active()) {  // the seed changes every step: a per-step value of the graph
    graphs_.note(x, y, num_elems);
    const std::uint64_t* seed_on_device = graphs_.value(seed);
    if (graphs_.replaying()) return;
    activate();
    return cuda::dropout_forward(y, mask, x, num_elems, p, seed_on_device, stream_.get());
  }
  activate();
  cuda::dropout_forward(y, mask, x, num_elems, p, seed, stream_.get());
}

void CudaBackend::dropout_backward(const float* dy, const float* mask, float* dx, std::size_t num_elems) {
  if (graphs_.replaying()) return;
  activate();
  cuda::dropout_backward(dx, dy, mask, num_elems, stream_.get());
}

// ---- loss ----

Backend::XentResult CudaBackend::softmax_xent(int n, int classes, const float* logits,
                                              const std::int32_t* labels, float* dlogits) {
  check_xent_shape(n, classes, "softmax_xent");
  if (graphs_.active()) {
    graph_loss_ = GraphLoss{n, classes, labels};
    graphs_.note(logits, dlogits, static_cast<std::size_t>(n) * static_cast<std::size_t>(classes));
  }
  if (graphs_.replaying()) return XentResult{0.0, 0};
  activate();
  const XentScratchLayout layout = xent_scratch_layout(n);
  auto* base = static_cast<char*>(xent_scratch_.reserve(layout.num_bytes, stream_.get(), "softmax_xent"));
  auto* totals = reinterpret_cast<XentTotals*>(base);
  auto* row_loss = reinterpret_cast<float*>(base + layout.row_loss_offset);
  auto* row_status = reinterpret_cast<std::int32_t*>(base + layout.row_status_offset);
  cuda::softmax_xent(totals, dlogits, row_loss, row_status, logits, labels, n, classes, stream_.get());
  if (graphs_.active()) return XentResult{0.0, 0};  // captured: the totals come from end_graph_step
  XentTotals host{};
  copy_to_host(&host, totals, sizeof(host));
  if (host.first_bad_row < n) {
    std::int32_t label = 0;
    copy_to_host(&label, labels + host.first_bad_row, sizeof(label));
    throw ComputeError(bad_label_message(host.first_bad_row, label, classes));
  }
  return XentResult{host.loss_sum, static_cast<std::int64_t>(host.correct)};
}

// ---- optimizer steps ----

void CudaBackend::sgd_step(float* w, const float* g, float* velocity, std::size_t num_elems,
                           const update::SgdCoefficients& c) {
  check_sgd_velocity(velocity, c.momentum, "sgd_step");
  if (graphs_.active()) {  // the rate follows the schedule: a per-step value of the graph
    graphs_.note(w, g, num_elems);
    const update::SgdCoefficients* on_device = graphs_.value(c);
    if (graphs_.replaying()) return;
    activate();
    return cuda::sgd_step(w, velocity, g, num_elems, on_device, stream_.get());
  }
  activate();
  cuda::sgd_step(w, velocity, g, num_elems, c, stream_.get());
}

void CudaBackend::adam_step(float* w, const float* g, float* m, float* v, std::size_t num_elems,
                            const update::AdamCoefficients& c) {
  if (graphs_.active()) {  // the step size follows the step count: a per-step value of the graph
    graphs_.note(w, g, num_elems);
    const update::AdamCoefficients* on_device = graphs_.value(c);
    if (graphs_.replaying()) return;
    activate();
    return cuda::adam_step(w, m, v, g, num_elems, on_device, stream_.get());
  }
  activate();
  cuda::adam_step(w, m, v, g, num_elems, c, stream_.get());
}

// ---- CUDA graphs of whole steps ----

bool CudaBackend::begin_graph_step(int key) {
  activate();
  graph_loss_ = GraphLoss{};
  return graphs_.begin(key, stream_.get(), {workspace_.data(), xent_scratch_.data()});
}

Backend::XentResult CudaBackend::end_graph_step() {
  activate();
  if (graphs_.active() && graph_loss_.n == 0) {
    abort_graph_step();
    throw ComputeError("end_graph_step: the step computed no loss (softmax_xent), so it has no result");
  }
  try {
    graphs_.end(stream_.get());
  } catch (const ComputeError&) {
    abort_graph_step();
    throw;
  }
  const GraphLoss loss = graph_loss_;
  XentTotals host{};
  copy_to_host(&host, xent_scratch_.data(), sizeof(host));  // waits for the graph
  if (host.first_bad_row < loss.n) {
    std::int32_t label = 0;
    copy_to_host(&label, loss.labels + host.first_bad_row, sizeof(label));
    throw ComputeError(bad_label_message(host.first_bad_row, label, loss.classes));
  }
  return XentResult{host.loss_sum, static_cast<std::int64_t>(host.correct)};
}

void CudaBackend::abort_graph_step() noexcept {
  if (cudaSetDevice(device_index_) == cudaSuccess) graphs_.abort(stream_.get());
}

}  // namespace cuda

std::unique_ptr<Backend> make_cuda_backend(int device_index, std::string* why_not, const ComputeOptions& options) {
  auto refuse = [why_not](std::string reason) -> std::unique_ptr<Backend> {
    if (why_not != nullptr) *why_not = std::move(reason);
    return nullptr;
  };
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    static_cast<void>(cudaGetLastError());  // leave no error behind for later checks
    return refuse(std::string("no CUDA device: cudaGetDeviceCount returned '") + cudaGetErrorString(status) +
                  "' (" + cudaGetErrorName(status) + ")");
  }
  if (count == 0) return refuse("no CUDA device: cudaGetDeviceCount returned 0 devices");
  if (device_index < 0 || device_index >= count) {
    return refuse("CUDA device " + std::to_string(device_index) + " requested but " + std::to_string(count) +
                  " present (valid indices 0.." + std::to_string(count - 1) + ")");
  }
  try {
    return std::make_unique<cuda::CudaBackend>(device_index, options);
  } catch (const ComputeError& e) {
    static_cast<void>(cudaGetLastError());
    return refuse("CUDA device " + std::to_string(device_index) + " unusable: " + e.what());
  }
}

}  // namespace pstrain::nn
