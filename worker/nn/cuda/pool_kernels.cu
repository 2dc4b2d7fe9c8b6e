// Max pooling (no padding). Forward: one thread per output, first maximum in
// window scan order (kh outer, kw inner, strict >). Backward: zero dx, then
// scatter dy through argmax with atomicAdd, which is correct for overlapping
// windows (k > stride); the order of the float adds into one dx element is
// then unspecified. The caller guarantees the input has < 2^31 elements.
#include "worker/nn/cuda/cuda_check.h"
#include "worker/nn/cuda/kernels.cuh"
#include "worker/nn/cuda/launch_config.cuh"

namespace pstrain::nn::cuda {
namespace {

struct PoolGeometry {
  int h, w, k, stride, out_h, out_w;
};

__global__ void maxpool_forward_kernel(float* y, std::int32_t* argmax, const float* x, PoolGeometry g,
                                       std::size_t num_outputs) {
  const std::size_t out_plane = static_cast<std::size_t>(g.out_h) * g.out_w;
  const std::size_t in_plane = static_cast<std::size_t>(g.h) * g.w;
  for (std::size_t o = global_thread_index(); o < num_outputs; o += grid_stride()) {
    const int ow = static_cast<int>(o % g.out_w);
    const int oh = static_cast<int>((o % out_plane) / g.out_w);
    const std::size_t base = (o / out_plane) * in_plane;  // start of this (image, channel) plane
    std::size_t best_index = base + static_cast<std::size_t>(oh * g.stride) * g.w + ow * g.stride;
    float best = x[best_index];
    for (int kh = 0; kh < g.k; ++kh) {
      const std::size_t row = base + static_cast<std::size_t>(oh * g.stride + kh) * g.w;
      for (int kw = 0; kw < g.k; ++kw) {
        const std::size_t index = row + ow * g.stride + kw;
        const float value = x[index];
        if (value > best) {
          best = value;
          best_index = index;
        }
      }
    }
    y[o] = best;
    argmax[o] = static_cast<std::int32_t>(best_index);
  }
}

__global__ void maxpool_backward_kernel(float* dx, const float* dy, const std::int32_t* argmax,
                                        std::size_t num_outputs) {
  for (std::size_t o = global_thread_index(); o < num_outputs; o += grid_stride()) {
    atomicAdd(dx + argmax[o], dy[o]);
  }
}

std::size_t num_outputs_of(const PoolShape& s) {
  return static_cast<std::size_t>(s.n) * s.c * s.out_h() * s.out_w();
}

}  // namespace

void maxpool_forward(float* y, std::int32_t* argmax, const float* x, const PoolShape& s,
                     cudaStream_t stream) {
  const std::size_t num_outputs = num_outputs_of(s);
  if (num_outputs == 0) return;
  const PoolGeometry g{s.h, s.w, s.k, s.stride, s.out_h(), s.out_w()};
  maxpool_forward_kernel<<<grid_size(num_outputs), kBlockSize, 0, stream>>>(y, argmax, x, g, num_outputs);
  check_launch("maxpool_forward");
}

void maxpool_backward(float* dx, const float* dy, const std::int32_t* argmax, const PoolShape& s,
                      cudaStream_t stream) {
  const std::size_t num_inputs = static_cast<std::size_t>(s.n) * s.c * s.h * s.w;
  fill(dx, 0.0f, num_inputs, stream);
  const std::size_t num_outputs = num_outputs_of(s);
  if (num_outputs == 0) return;
  maxpool_backward_kernel<<<grid_size(num_outputs), kBlockSize, 0, stream>>>(dx, dy, argmax, num_outputs);
  check_launch("maxpool_backward");
}

}  // namespace pstrain::nn::cuda
