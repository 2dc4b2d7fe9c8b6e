// im2col / col2im: lowering a convolution to a GEMM. One thread per col
// element (im2col) or per input element (col2im, a gather over the kernel
// window, so no atomics and a deterministic sum). See kernels.cuh.
#include "worker/nn/cuda/cuda_check.h"
#include "worker/nn/cuda/kernels.cuh"
#include "worker/nn/cuda/launch_config.cuh"

namespace pstrain::nn::cuda {
namespace {

// Plain copy of the shape for kernel arguments, with the derived sizes.
struct ConvGeometry {
  int c_in, h, w, k_h, k_w, stride, pad, out_h, out_w;
  std::size_t rows() const { return static_cast<std::size_t>(c_in) * k_h * k_w; }     // K
  std::size_t cols() const { return static_cast<std::size_t>(out_h) * out_w; }        // P
  std::size_t image_elems() const { return static_cast<std::size_t>(c_in) * h * w; }
};

ConvGeometry geometry_of(const Conv2dShape& s) {
  return ConvGeometry{s.c_in, s.h, s.w, s.k_h, s.k_w, s.stride, s.pad, s.out_h(), s.out_w()};
}

__global__ void im2col_kernel(float* col, const float* x, ConvGeometry g, std::size_t num_elems) {
  const std::size_t P = static_cast<std::size_t>(g.out_h) * g.out_w;
  const std::size_t K = static_cast<std::size_t>(g.c_in) * g.k_h * g.k_w;
  const std::size_t plane = static_cast<std::size_t>(g.h) * g.w;
  for (std::size_t idx = global_thread_index(); idx < num_elems; idx += grid_stride()) {
    const std::size_t p = idx % P;
    const std::size_t row = (idx / P) % K;
    const std::size_t image = idx / (P * K);
    const int ow = static_cast<int>(p % g.out_w);
    const int oh = static_cast<int>(p / g.out_w);
    const int kw = static_cast<int>(row % g.k_w);
    const int kh = static_cast<int>((row / g.k_w) % g.k_h);
    const std::size_t c = row / (static_cast<std::size_t>(g.k_w) * g.k_h);
    const int hh = oh * g.stride - g.pad + kh;
    const int ww = ow * g.stride - g.pad + kw;
    float value = 0.0f;
    if (hh >= 0 && hh < g.h && ww >= 0 && ww < g.w) {
      value = x[(image * g.c_in + c) * plane + static_cast<std::size_t>(hh) * g.w + ww];
    }
    col[idx] = value;
  }
}

__global__ void col2im_kernel(float* dx, const float* col, ConvGeometry g, std::size_t num_elems) {
  const std::size_t P = static_cast<std::size_t>(g.out_h) * g.out_w;
  const std::size_t K = static_cast<std::size_t>(g.c_in) * g.k_h * g.k_w;
  for (std::size_t idx = global_thread_index(); idx < num_elems; idx += grid_stride()) {
    const int ww = static_cast<int>(idx % g.w);
    const int hh = static_cast<int>((idx / g.w) % g.h);
    const std::size_t c = (idx / (static_cast<std::size_t>(g.w) * g.h)) % g.c_in;
    const std::size_t image = idx / (static_cast<std::size_t>(g.w) * g.h * g.c_in);
    const float* col_image = col + image * K * P;
    float total = 0.0f;
    for (int kh = 0; kh < g.k_h; ++kh) {
      const int oh_scaled = hh + g.pad - kh;  // = oh * stride when (hh, kh) is read by row oh
      if (oh_scaled < 0 || oh_scaled % g.stride != 0) continue;
      const int oh = oh_scaled / g.stride;
      if (oh >= g.out_h) continue;
      for (int kw = 0; kw < g.k_w; ++kw) {
        const int ow_scaled = ww + g.pad - kw;
        if (ow_scaled < 0 || ow_scaled % g.stride != 0) continue;
        const int ow = ow_scaled / g.stride;
        if (ow >= g.out_w) continue;
        const std::size_t row = (c * g.k_h + kh) * g.k_w + kw;
        total += col_image[row * P + static_cast<std::size_t>(oh) * g.out_w + ow];
      }
    }
    dx[idx] = total;
  }
}

}  // namespace

void im2col(float* col, const float* x, const Conv2dShape& s, int num_images, cudaStream_t stream) {
  const ConvGeometry g = geometry_of(s);
  const std::size_t num_elems = static_cast<std::size_t>(num_images) * g.rows() * g.cols();
  if (num_elems == 0) return;
  im2col_kernel<<<grid_size(num_elems), kBlockSize, 0, stream>>>(col, x, g, num_elems);
  check_launch("im2col");
}

void col2im(float* dx, const float* col, const Conv2dShape& s, int num_images, cudaStream_t stream) {
  const ConvGeometry g = geometry_of(s);
  const std::size_t num_elems = static_cast<std::size_t>(num_images) * g.image_elems();
  if (num_elems == 0) return;
  col2im_kernel<<<grid_size(num_elems), kBlockSize, 0, stream>>>(dx, col, g, num_elems);
  check_launch("col2im");
}

}  // namespace pstrain::nn::cuda
