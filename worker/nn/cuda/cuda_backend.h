// The CUDA implementation of nn::Backend: cuBLAS SGEMMs for convolution
// (im2col/col2im lowering, strided-batched over images) and linear layers,
// own kernels for everything else (kernels.cuh).
//
// Ownership: the backend owns one non-blocking stream (cudaStreamNonBlocking,
// so it never serializes with the legacy default stream), a cuBLAS handle
// bound to it, and scratch buffers that grow on demand. All work is queued on
// that stream in call order; copy_to_host, copy_from_host, softmax_xent and
// synchronize wait for it, the other methods return once their work is
// queued. Every public method first makes its device current, so a backend
// may be created on one thread and used on another, but never by two threads
// at once. Errors (CUDA, cuBLAS, launch, shape) throw ComputeError whose text
// starts with the operation; asynchronous kernel faults surface at the next
// synchronizing call.
//
// CUDA graphs (begin_graph_step / end_graph_step, step_graph.h): a whole
// training step captured once per batch size and replayed; cuBLAS gets a
// workspace of the backend's (cublasSetWorkspace) so nothing allocates in a step.
//
// Created through make_cuda_backend (backend.h), which reports a missing or
// unusable device as nullptr plus a reason instead of throwing.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <string_view>

#include "worker/nn/backend.h"
#include "worker/nn/cuda/device_buffer.h"
#include "worker/nn/cuda/step_graph.h"

namespace pstrain::nn::cuda {

class CudnnConv;  // cudnn_conv.h: in builds with cuDNN

class CudaBackend final : public Backend {
 public:
  // Sets up stream, cuBLAS (FP32 math, or TF32 with options.tf32), cuDNN for
  // the convolutions (with options.cudnn, in builds with cuDNN, when the loaded
  // cuDNN is of the build's major version) and a probe kernel on
  // `device_index` (which must exist); throws ComputeError when any of it fails.
  // name() says which path the convolutions take.
  explicit CudaBackend(int device_index, const ComputeOptions& options = {});
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  // "cuda:0 (NVIDIA H200, sm_90, cuDNN 9.14.0 (built with 9.19.0), fp32)" or "... own conv kernels ..."
  std::string name() const override { return name_; }
  bool uses_cudnn() const { return cudnn_ != nullptr; }
  bool is_cuda() const override { return true; }
  // The stream every call of this backend is ordered on, and its device (the copy stream's events order against it).
  cudaStream_t stream() const { return stream_.get(); }
  int device_index() const { return device_index_; }
  ComputePath compute_path() const override { return path_; }

  void* allocate(std::size_t num_bytes) override;
  void deallocate(void* ptr) noexcept override;  // waits for the stream first
  void copy_from_host(void* dst, const void* host_src, std::size_t num_bytes) override;
  void copy_to_host(void* host_dst, const void* src, std::size_t num_bytes) override;
  void copy(void* dst, const void* src, std::size_t num_bytes) override;
  void fill(float* x, float value, std::size_t num_elems) override;
  void synchronize() override;

  void conv2d_forward(const Conv2dShape& s, const float* x, const float* w, const float* b,
                      float* y) override;
  void conv2d_backward(const Conv2dShape& s, const float* x, const float* w, const float* dy, float* dx,
                       float* dw, float* db) override;
  bool conv2d_relu_forward(const Conv2dShape& s, const float* x, const float* w, const float* b,
                           float* y) override;  // cuDNN only
  void linear_forward(const LinearShape& s, const float* x, const float* w, const float* b,
                      float* y) override;
  void linear_backward(const LinearShape& s, const float* x, const float* w, const float* dy, float* dx,
                       float* dw, float* db) override;
  void relu_forward(const float* x, float* y, std::size_t num_elems) override;
  void relu_backward(const float* y, const float* dy, float* dx, std::size_t num_elems) override;
  void maxpool_forward(const PoolShape& s, const float* x, float* y, std::int32_t* argmax) override;
  void maxpool_backward(const PoolShape& s, const float* dy, const std::int32_t* argmax,
                        float* dx) override;
  void dropout_forward(const float* x, float* y, float* mask, std::size_t num_elems, float p,
                       std::uint64_t seed) override;
  void dropout_backward(const float* dy, const float* mask, float* dx, std::size_t num_elems) override;
  XentResult softmax_xent(int n, int classes, const float* logits, const std::int32_t* labels,
                          float* dlogits) override;

  void sgd_step(float* w, const float* g, float* velocity, std::size_t num_elems,
                const update::SgdCoefficients& c) override;
  void adam_step(float* w, const float* g, float* m, float* v, std::size_t num_elems,
                 const update::AdamCoefficients& c) override;

  // CUDA graphs of whole steps (step_graph.h): while one is replayed, the layer calls enqueue
  // nothing; dropout seeds and optimizer coefficients go to the graph's per-step values.
  bool begin_graph_step(int key) override;
  XentResult end_graph_step() override;
  void abort_graph_step() noexcept override;
  std::size_t num_step_graphs() const { return graphs_.num_graphs(); }

 private:
  struct StreamDeleter { void operator()(cudaStream_t stream) const noexcept; };
  struct CublasDeleter { void operator()(cublasHandle_t handle) const noexcept; };
  struct CudnnDeleter { void operator()(CudnnConv* conv) const noexcept; };

  void activate() const;  // cudaSetDevice(device_index_)
  // Sets up cudnn_ when asked for and usable; says which path the convolutions take ({conv, detail}).
  ComputePath convolution_path(const ComputeOptions& options, cudaStream_t stream);
  // Throw ComputeError "cuda:N <what>: <error name> ('<error string>')" on failure.
  void check(cudaError_t status, std::string_view what) const;
  void check(cublasStatus_t status, std::string_view what) const;
  // Images per im2col chunk so that chunk * floats_per_image fits the workspace limit (>= 1).
  static int images_per_chunk(int num_images, std::size_t floats_per_image);
  float* workspace_floats(std::size_t num_elems, std::string_view op);

  int device_index_ = 0;
  std::string name_;
  ComputePath path_;
  std::unique_ptr<CUstream_st, StreamDeleter> stream_;
  std::unique_ptr<cublasContext, CublasDeleter> cublas_;
  DeviceBuffer workspace_;     // im2col columns and per-image dW partials
  DeviceBuffer xent_scratch_;  // softmax_xent totals and per-row terms
  std::unique_ptr<CudnnConv, CudnnDeleter> cudnn_;  // null: the own im2col kernels
  DeviceBuffer cublas_workspace_;  // cublasSetWorkspace: cuBLAS allocates nothing itself (capture-safe)
  std::unique_ptr<CUstream_st, StreamDeleter> upload_stream_;  // copy_from_host while capturing
  StepGraphs graphs_;
  struct GraphLoss { int n = 0, classes = 0; const std::int32_t* labels = nullptr; };
  GraphLoss graph_loss_;  // the graph step's softmax_xent, read at end_graph_step
};

}  // namespace pstrain::nn::cuda
