// The CPU backend, the reference implementation of nn::Backend:
// convolutions and fully connected layers on oneDNN primitives (cached per
// shape, see dnnl_conv.h / dnnl_linear.h), the other operations as plain
// loops (cpu_ops.h). "Device" memory is 64-byte aligned host memory; a
// buffer of kPagesOfItsOwnBytes or more (the model's flat parameters) is
// whole pages of its own (mmap, page aligned, unmapped when freed), so a
// parameter-server worker may map pulled pages into it (worker/client/pull_pages.h).
//
// Threads: oneDNN's OpenMP pool runs `threads` threads (0 = all cores); the
// count is applied to the calling thread before every oneDNN call, so the
// backend may be driven from any one thread at a time. Not thread-safe.
#pragma once

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include <dnnl.hpp>

#include "worker/nn/backend.h"
#include "worker/nn/dnnl_conv.h"
#include "worker/nn/dnnl_linear.h"
#include "worker/nn/omp_threads.h"

namespace pstrain::nn {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads);

  std::string name() const override;
  ComputePath compute_path() const override;  // "onednn", fp32
  bool is_cuda() const override { return false; }
  int threads() const { return threads_.count(); }

  static constexpr std::size_t kPagesOfItsOwnBytes = std::size_t{256} << 10;
  void* allocate(std::size_t num_bytes) override;
  void deallocate(void* ptr) noexcept override;
  void copy_from_host(void* dst, const void* host_src, std::size_t num_bytes) override;
  void copy_to_host(void* host_dst, const void* src, std::size_t num_bytes) override;
  void copy(void* dst, const void* src, std::size_t num_bytes) override;
  void fill(float* x, float value, std::size_t num_elems) override;
  void synchronize() override {}

  void conv2d_forward(const Conv2dShape& s, const float* x, const float* w, const float* b, float* y) override;
  void conv2d_backward(const Conv2dShape& s, const float* x, const float* w, const float* dy, float* dx,
                       float* dw, float* db) override;
  void linear_forward(const LinearShape& s, const float* x, const float* w, const float* b, float* y) override;
  void linear_backward(const LinearShape& s, const float* x, const float* w, const float* dy, float* dx,
                       float* dw, float* db) override;
  void relu_forward(const float* x, float* y, std::size_t num_elems) override;
  void relu_backward(const float* y, const float* dy, float* dx, std::size_t num_elems) override;
  void maxpool_forward(const PoolShape& s, const float* x, float* y, std::int32_t* argmax) override;
  void maxpool_backward(const PoolShape& s, const float* dy, const std::int32_t* argmax, float* dx) override;
  void dropout_forward(const float* x, float* y, float* mask, std::size_t num_elems, float p,
                       std::uint64_t seed) override;
  void dropout_backward(const float* dy, const float* mask, float* dx, std::size_t num_elems) override;
  XentResult softmax_xent(int n, int classes, const float* logits, const std::int32_t* labels,
                          float* dlogits) override;
  void sgd_step(float* w, const float* g, float* velocity, std::size_t num_elems,
                const update::SgdCoefficients& c) override;
  void adam_step(float* w, const float* g, float* m, float* v, std::size_t num_elems,
                 const update::AdamCoefficients& c) override;

 private:
  DnnlConv& conv_for(const Conv2dShape& s);
  DnnlLinear& linear_for(const LinearShape& s);

  OmpThreads threads_;
  dnnl::engine engine_;
  dnnl::stream stream_;
  std::map<std::array<int, 9>, std::unique_ptr<DnnlConv>> convs_;
  std::map<std::array<int, 3>, std::unique_ptr<DnnlLinear>> linears_;
  std::mutex mapped_mutex_;
  std::unordered_map<void*, std::size_t> mapped_;  // allocations of whole pages: their lengths
};

}  // namespace pstrain::nn
