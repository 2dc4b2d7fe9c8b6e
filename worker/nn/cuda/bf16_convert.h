// float32 <-> bfloat16 on the GPU, for ps.wire_dtype = "bfloat16" with CUDA
// workers: a gradient narrowed on the device before its download, weights
// widened on the device after their upload, so the wire type halves the PCIe
// bytes instead of adding host work. Bit for bit common/base/bfloat16.h's
// conversions (round to nearest, ties to even; NaN stays a quiet NaN, +-Inf
// stay +-Inf; widening exact). Both run on the backend's stream (ordered with
// its kernels, not synchronized); the pointers are device memory of `cuda`.
// ComputeError when `cuda` is not the CUDA backend or the launch fails.
#pragma once

#include <cstddef>
#include <cstdint>

#include "worker/nn/backend.h"

namespace pstrain::nn::cuda {

void narrow_to_bfloat16(Backend& cuda, const float* src, std::uint16_t* dst, std::size_t num_elems);
void widen_from_bfloat16(Backend& cuda, const std::uint16_t* src, float* dst, std::size_t num_elems);

// The same kernels on another stream of the current device (`stream`: a
// cudaStream_t, e.g. the copy engine's copy stream; worker/nn/cuda/copy_stream.cc).
void narrow_to_bfloat16_on(void* stream, const float* src, std::uint16_t* dst, std::size_t num_elems);
void widen_from_bfloat16_on(void* stream, const std::uint16_t* src, float* dst, std::size_t num_elems);

}  // namespace pstrain::nn::cuda
