// Turning CUDA runtime and cuBLAS status codes into ComputeError.
//
// Every runtime/cuBLAS call of the CUDA backend goes through check_cuda /
// check_cublas, and every kernel launch is followed by check_launch (which
// reads cudaGetLastError, llm.c style). The message names the operation and
// the library's own error string, e.g.
//   "relu_forward: kernel launch failed: invalid configuration argument".
// Asynchronous faults inside a kernel surface at the next checked call that
// synchronizes (copy_to_host, synchronize, softmax_xent).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <string>
#include <string_view>

#include "common/base/errors.h"

namespace pstrain::nn::cuda {

inline void check_cuda(cudaError_t status, std::string_view what) {
  if (status != cudaSuccess) {
    throw ComputeError(std::string(what) + ": " + cudaGetErrorName(status) + " ('" +
                       cudaGetErrorString(status) + "')");
  }
}

inline void check_cublas(cublasStatus_t status, std::string_view what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw ComputeError(std::string(what) + ": " + cublasGetStatusName(status) + " ('" +
                       cublasGetStatusString(status) + "')");
  }
}

// Call right after a <<<...>>> launch; `kernel` names the launcher.
inline void check_launch(std::string_view kernel) {
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) {
    throw ComputeError(std::string(kernel) + ": kernel launch failed: " + cudaGetErrorName(status) +
                       " ('" + cudaGetErrorString(status) + "')");
  }
}

}  // namespace pstrain::nn::cuda
