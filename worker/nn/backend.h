// The compute backend: one interface, a CPU implementation (oneDNN/OpenBLAS,
// the reference) and a CUDA implementation (cuBLAS + own kernels), chosen at
// run time. Layers and models above it are backend-agnostic.
//
// Conventions: tensors are dense float32 in NCHW (activations) and
// [out, in, kh, kw] / [out, in] (weights); pointers given to a backend point
// to memory it allocated (device memory for CUDA). Gradients dw/db are
// OVERWRITTEN, not accumulated. A null dx means "not needed" (first layer).
// Every method may throw ComputeError. Not thread-safe: one backend per
// worker thread. CUDA work is ordered on the backend's stream; synchronize()
// waits for it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/math/update_rules.h"

namespace pstrain::nn {

struct Conv2dShape {
  int n = 0, c_in = 0, h = 0, w = 0;   // input  [n, c_in, h, w]
  int c_out = 0, k_h = 0, k_w = 0;     // weight [c_out, c_in, k_h, k_w], bias [c_out]
  int stride = 1, pad = 0;
  int out_h() const { return (h + 2 * pad - k_h) / stride + 1; }
  int out_w() const { return (w + 2 * pad - k_w) / stride + 1; }  // output [n, c_out, out_h, out_w]
};

struct PoolShape {
  int n = 0, c = 0, h = 0, w = 0;      // input [n, c, h, w]
  int k = 2, stride = 2;               // max pooling window and stride, no padding
  int out_h() const { return (h - k) / stride + 1; }
  int out_w() const { return (w - k) / stride + 1; }  // output [n, c, out_h, out_w]
};

struct LinearShape {
  int n = 0, in = 0, out = 0;          // x [n, in], w [out, in], b [out], y [n, out]
};

// What a backend's convolutions run on, and in what precision: the worker's
// start-up line and summary.json's "compute" say it (docs/models.md).
struct ComputePath {
  std::string conv;       // "cudnn", "cuda-im2col" (own kernels: im2col + cuBLAS) or "onednn" (the CPU)
  std::string detail;     // "cuDNN 9.14.0 (built with 9.19.0)", "own conv kernels (built without cuDNN)", "oneDNN 3.x"
  std::string precision;  // "fp32" or "tf32"
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;   // e.g. "cpu (oneDNN, 2 threads)", "cuda:0 (NVIDIA H200)"
  virtual bool is_cuda() const = 0;
  virtual ComputePath compute_path() const = 0;

  // ---- memory (bytes) ----
  virtual void* allocate(std::size_t num_bytes) = 0;
  virtual void deallocate(void* ptr) noexcept = 0;
  virtual void copy_from_host(void* dst, const void* host_src, std::size_t num_bytes) = 0;
  virtual void copy_to_host(void* host_dst, const void* src, std::size_t num_bytes) = 0;
  virtual void copy(void* dst, const void* src, std::size_t num_bytes) = 0;  // device to device
  virtual void fill(float* x, float value, std::size_t num_elems) = 0;
  virtual void synchronize() = 0;

  // ---- layers ----
  // y = conv(x, w) + b
  virtual void conv2d_forward(const Conv2dShape& s, const float* x, const float* w, const float* b,
                              float* y) = 0;
  virtual void conv2d_backward(const Conv2dShape& s, const float* x, const float* w, const float* dy,
                               float* dx, float* dw, float* db) = 0;
  // y = relu(conv(x, w) + b) in one call where the backend fuses them (the CUDA backend on
  // cuDNN: its convolution-bias-activation call). false: nothing was written, and the caller
  // runs conv2d_forward and relu_forward (the CPU, the own CUDA kernels, a shape cuDNN does
  // not fuse). After its first call for a shape, a backend answers the same for it every time.
  virtual bool conv2d_relu_forward(const Conv2dShape& /*s*/, const float* /*x*/, const float* /*w*/,
                                   const float* /*b*/, float* /*y*/) {
    return false;
  }
  // y = x w^T + b
  virtual void linear_forward(const LinearShape& s, const float* x, const float* w, const float* b,
                              float* y) = 0;
  virtual void linear_backward(const LinearShape& s, const float* x, const float* w, const float* dy,
                               float* dx, float* dw, float* db) = 0;
  virtual void relu_forward(const float* x, float* y, std::size_t num_elems) = 0;
  // dx = dy * (y > 0); y is the forward output.
  virtual void relu_backward(const float* y, const float* dy, float* dx, std::size_t num_elems) = 0;
  // argmax[i] = flat index into x (within the whole tensor) of output i's maximum.
  virtual void maxpool_forward(const PoolShape& s, const float* x, float* y, std::int32_t* argmax) = 0;
  virtual void maxpool_backward(const PoolShape& s, const float* dy, const std::int32_t* argmax,
                                float* dx) = 0;
  // Inverted dropout with drop probability p: mask[i] = keep ? 1/(1-p) : 0,
  // keep decided by a counter-based hash of (seed, i) that both backends share
  // (see nn/dropout_hash.h), y = x * mask.
  virtual void dropout_forward(const float* x, float* y, float* mask, std::size_t num_elems, float p,
                               std::uint64_t seed) = 0;
  virtual void dropout_backward(const float* dy, const float* mask, float* dx, std::size_t num_elems) = 0;
  // Softmax cross-entropy over logits [n, classes] with labels [n] (on the
  // device). Writes dlogits = (softmax - onehot) / n and returns, on the host,
  // the summed (not averaged) loss and the number of correct argmax predictions.
  struct XentResult { double loss_sum; std::int64_t correct; };
  virtual XentResult softmax_xent(int n, int classes, const float* logits, const std::int32_t* labels,
                                  float* dlogits) = 0;

  // ---- CUDA graphs (the CUDA backend, worker/nn/cuda/step_graph.h; other backends run
  // every step as usual) ----
  // Begins a training step that may run as one CUDA graph, keyed by its batch size. true: it
  // does (captured now, or replayed), and end_graph_step must follow the step's calls; between
  // them only the step's layer, loss and optimizer calls and copy_from_host of its inputs may
  // be made, softmax_xent returns zeros (end_graph_step gives the totals) and nothing is copied
  // to the host. A key's first step runs as usual (false), so its memory is made before capture.
  virtual bool begin_graph_step(int /*key*/) { return false; }
  // Runs the step's graph, waits for it, and returns the step's softmax_xent totals.
  // Throws ComputeError without a begun step, or when the graph cannot run.
  virtual XentResult end_graph_step();
  // Ends a begun step that failed midway: nothing of it runs. Never throws.
  virtual void abort_graph_step() noexcept {}

  // ---- optimizer steps: the rules of common/math/update_rules.h, with the step's
  // coefficients from update::sgd_coefficients / adam_coefficients ----
  // velocity may be null only when c.momentum == 0 (ComputeError otherwise).
  virtual void sgd_step(float* w, const float* g, float* velocity, std::size_t num_elems,
                        const update::SgdCoefficients& c) = 0;
  virtual void adam_step(float* w, const float* g, float* m, float* v, std::size_t num_elems,
                         const update::AdamCoefficients& c) = 0;
};

// How a GPU backend computes (the CPU backend ignores it).
struct ComputeOptions {
  bool tf32 = false;   // workload.precision = "tf32": cuBLAS and cuDNN may use TF32 tensor cores
  bool cudnn = true;   // convolutions by cuDNN when the build has it (else the own im2col kernels)
};

// device: "auto" (CUDA if a device is present, else CPU), "cpu" or "cuda".
// threads: CPU threads (0 = all cores). `chosen` (optional) receives a
// one-line message saying which backend was picked and why, e.g.
// "device auto: no CUDA device: cudaGetDeviceCount returned ..., using cpu"; on a host without
// NVIDIA's driver "auto" takes the CPU without starting CUDA (common/observe/gpu_presence.h).
// "cuda" without a usable device throws ComputeError with that reason.
std::unique_ptr<Backend> make_backend(std::string_view device, int threads, std::string* chosen = nullptr,
                                      const ComputeOptions& options = {});

// CPU backend, always available.
std::unique_ptr<Backend> make_cpu_backend(int threads);
// CUDA backend, or nullptr with `why_not` set when built without CUDA or no device is present.
std::unique_ptr<Backend> make_cuda_backend(int device_index, std::string* why_not, const ComputeOptions& options = {});

}  // namespace pstrain::nn
