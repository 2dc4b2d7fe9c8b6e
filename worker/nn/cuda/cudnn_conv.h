// Convolutions by cuDNN 9 (its convolution API: forward, backward data,
// backward filter, bias gradient) for the CUDA backend, in place of the
// im2col + cuBLAS lowering (cuda_gemm_layers.cu), which stays the reference
// and the path of builds without cuDNN (PSTRAIN_CUDNN=OFF, or none found).
//
// One plan per convolution shape (batch included): the tensor, filter and
// convolution descriptors and, for each of the three directions, the
// algorithm cuDNN's heuristics rank first among those that succeed, prefer
// deterministic ones (the same gradients every run) and fit the workspace
// limit. Plans are made on first use of a shape and kept, as
// torch.backends.cudnn does; a last partial batch gets a plan of its own.
// Precision: "fp32" asks cuDNN for FMA math (no TF32 tensor cores, close to
// the CPU reference); "tf32" lets it use tensor-core math.
//
// The handle is bound to the backend's stream; all work is queued there.
// Workspace comes from the backend's scratch buffer (passed in per call).
// Errors throw ComputeError naming the operation and cuDNN's status.
#pragma once

#include <cudnn.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "worker/nn/backend.h"

namespace pstrain::nn::cuda {

class DeviceBuffer;

// The cuDNN library this process loaded against the one it was built with:
// "cuDNN 9.14.0 (built with 9.19.0)". cuDNN runs programs built against the
// same or an older minor version only; the legacy convolution API used here
// is present in every cuDNN 9, so an older library is used with a note, and
// a library of another major version is refused (usable() false).
struct CudnnVersion {
  std::size_t loaded = 0, built = 0;  // cudnnGetVersion(), CUDNN_VERSION: major*10000 + minor*100 + patch
  bool usable() const { return loaded / 10000 == built / 10000; }
  std::string text() const;
};
CudnnVersion cudnn_version();

class CudnnConv {
 public:
  enum class Math { kFp32, kTf32 };
  // Throws ComputeError when cuDNN cannot be set up on the current device.
  CudnnConv(cudaStream_t stream, Math math);
  ~CudnnConv();
  CudnnConv(const CudnnConv&) = delete;
  CudnnConv& operator=(const CudnnConv&) = delete;

  void forward(const Conv2dShape& s, const float* x, const float* w, const float* b, float* y,
               DeviceBuffer& workspace);
  // y = relu(conv(x, w) + b) in one cuDNN call (cudnnConvolutionBiasActivationForward, the
  // plan's forward algorithm). false, nothing written, when cuDNN does not fuse this shape with
  // that algorithm: found at the first call, and then answered without calling again.
  bool forward_relu(const Conv2dShape& s, const float* x, const float* w, const float* b, float* y,
                    DeviceBuffer& workspace);
  // What forward_relu answers for s (true before its first call).
  bool fuses(const Conv2dShape& s);
  // dx may be null (the first layer needs no input gradient). dw and db are overwritten.
  void backward(const Conv2dShape& s, const float* x, const float* w, const float* dy, float* dx, float* dw,
                float* db, DeviceBuffer& workspace);

  // "cudnn fwd 1, bwd-data 1, bwd-filter 1" (cuDNN's algorithm enums) of the plan for s (made if needed), for logs and tests.
  std::string algorithms(const Conv2dShape& s);

 private:
  struct Plan;
  using Key = std::tuple<int, int, int, int, int, int, int, int, int>;
  Plan& plan(const Conv2dShape& s);
  void* workspace_for(DeviceBuffer& workspace, std::size_t num_bytes, const char* op);

  cudnnHandle_t handle_ = nullptr;
  cudaStream_t stream_ = nullptr;
  Math math_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace pstrain::nn::cuda
