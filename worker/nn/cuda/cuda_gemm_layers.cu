// CudaBackend's GEMM layers: convolution (im2col + strided-batched SGEMM,
// col2im for dx) and linear (one SGEMM each way).
//
// cuBLAS is column-major; a row-major matrix M [r, c] is, to cuBLAS, M^T
// (c x r, leading dimension c). So a row-major product C = A B is issued as
// the column-major C^T = B^T A^T, i.e. with the operands swapped. Per image
// i, with K = c_in*k_h*k_w, P = out_h*out_w and col_i [K, P] = im2col(x_i):
//   forward   y_i [c_out, P]  = W [c_out, K] col_i
//   backward  dW              = sum_i dy_i [c_out, P] col_i^T  (per-image partials, then summed)
//             dcol_i [K, P]   = W^T dy_i,  dx_i = col2im(dcol_i)
//             db[c]           = sum over i, p of dy_i[c, p]
// Images are processed in chunks so the scratch memory stays under
// kWorkspaceLimitFloats (at least one image per chunk).
#include <algorithm>

#include "worker/nn/cuda/cuda_backend.h"
#if defined(PSTRAIN_HAVE_CUDNN)
#include "worker/nn/cuda/cudnn_conv.h"
#endif
#include "worker/nn/cuda/kernels.cuh"
#include "worker/nn/shape_checks.h"

namespace pstrain::nn::cuda {
namespace {

constexpr std::size_t kWorkspaceLimitFloats = std::size_t{64} << 20;  // 256 MiB

constexpr float kOne = 1.0f;
constexpr float kZero = 0.0f;

struct ConvSizes {
  int rows;              // K = c_in * k_h * k_w
  int cols;              // P = out_h * out_w
  std::size_t in_image;  // elements of one input image
  std::size_t out_image; // elements of one output image
};

ConvSizes conv_sizes(const Conv2dShape& s) {
  const int cols = s.out_h() * s.out_w();
  return ConvSizes{s.c_in * s.k_h * s.k_w, cols, static_cast<std::size_t>(s.c_in) * s.h * s.w,
                   static_cast<std::size_t>(s.c_out) * cols};
}

long long as_stride(std::size_t num_elems) { return static_cast<long long>(num_elems); }

}  // namespace

int CudaBackend::images_per_chunk(int num_images, std::size_t floats_per_image) {
  const std::size_t fit = kWorkspaceLimitFloats / std::max<std::size_t>(floats_per_image, 1);
  return static_cast<int>(std::clamp<std::size_t>(fit, 1, static_cast<std::size_t>(num_images)));
}

float* CudaBackend::workspace_floats(std::size_t num_elems, std::string_view op) {
  return static_cast<float*>(workspace_.reserve(num_elems * sizeof(float), stream_.get(), op));
}

void CudaBackend::conv2d_forward(const Conv2dShape& s, const float* x, const float* w, const float* b,
                                 float* y) {
  check_shape(s, "conv2d_forward");
  if (graphs_.replaying()) return;  // replayed by the step's CUDA graph
  activate();
#if defined(PSTRAIN_HAVE_CUDNN)
  if (cudnn_) return cudnn_->forward(s, x, w, b, y, workspace_);
#endif
  const ConvSizes z = conv_sizes(s);
  const std::size_t col_floats = static_cast<std::size_t>(z.rows) * z.cols;
  const int chunk = images_per_chunk(s.n, col_floats);
  float* col = workspace_floats(static_cast<std::size_t>(chunk) * col_floats, "conv2d_forward");
  for (int first = 0; first < s.n; first += chunk) {
    const int count = std::min(chunk, s.n - first);
    im2col(col, x + static_cast<std::size_t>(first) * z.in_image, s, count, stream_.get());
    // y_i^T (P x c_out) = col_i^T (P x K) * W^T (K x c_out)
    check(cublasSgemmStridedBatched(cublas_.get(), CUBLAS_OP_N, CUBLAS_OP_N, z.cols, s.c_out, z.rows, &kOne,
                                    col, z.cols, as_stride(col_floats), w, z.rows, 0, &kZero,
                                    y + static_cast<std::size_t>(first) * z.out_image, z.cols,
                                    as_stride(z.out_image), count),
          "conv2d_forward: cublasSgemmStridedBatched");
  }
  add_bias(y, b, static_cast<std::size_t>(s.n), s.c_out, static_cast<std::size_t>(z.cols), stream_.get());
}

bool CudaBackend::conv2d_relu_forward(const Conv2dShape& s, const float* x, const float* w, const float* b,
                                      float* y) {
#if defined(PSTRAIN_HAVE_CUDNN)
  if (!cudnn_) return false;
  check_shape(s, "conv2d_relu_forward");
  if (graphs_.replaying()) return cudnn_->fuses(s);  // replayed by the step's CUDA graph, as captured
  activate();
  return cudnn_->forward_relu(s, x, w, b, y, workspace_);
#else
  static_cast<void>(s);
  static_cast<void>(x);
  static_cast<void>(w);
  static_cast<void>(b);
  static_cast<void>(y);
  return false;
#endif
}

void CudaBackend::conv2d_backward(const Conv2dShape& s, const float* x, const float* w, const float* dy,
                                  float* dx, float* dw, float* db) {
  check_shape(s, "conv2d_backward");
  if (graphs_.replaying()) return;  // replayed by the step's CUDA graph
  activate();
#if defined(PSTRAIN_HAVE_CUDNN)
  if (cudnn_) return cudnn_->backward(s, x, w, dy, dx, dw, db, workspace_);
#endif
  const ConvSizes z = conv_sizes(s);
  const std::size_t col_floats = static_cast<std::size_t>(z.rows) * z.cols;
  const std::size_t dw_floats = static_cast<std::size_t>(s.c_out) * z.rows;
  const int chunk = images_per_chunk(s.n, col_floats + dw_floats);
  float* col = workspace_floats(static_cast<std::size_t>(chunk) * (col_floats + dw_floats), "conv2d_backward");
  float* dw_partials = col + static_cast<std::size_t>(chunk) * col_floats;

  bias_grad(db, dy, static_cast<std::size_t>(s.n), s.c_out, static_cast<std::size_t>(z.cols), stream_.get());
  for (int first = 0; first < s.n; first += chunk) {
    const int count = std::min(chunk, s.n - first);
    const float* dy_chunk = dy + static_cast<std::size_t>(first) * z.out_image;
    im2col(col, x + static_cast<std::size_t>(first) * z.in_image, s, count, stream_.get());
    // partial_i^T (K x c_out) = col_i (K x P) * dy_i^T (P x c_out)
    check(cublasSgemmStridedBatched(cublas_.get(), CUBLAS_OP_T, CUBLAS_OP_N, z.rows, s.c_out, z.cols, &kOne,
                                    col, z.cols, as_stride(col_floats), dy_chunk, z.cols,
                                    as_stride(z.out_image), &kZero, dw_partials, z.rows, as_stride(dw_floats),
                                    count),
          "conv2d_backward (dw): cublasSgemmStridedBatched");
    sum_batches(dw, dw_partials, count, dw_floats, first > 0, stream_.get());
    if (dx == nullptr) continue;
    // dcol_i^T (P x K) = dy_i^T (P x c_out) * W (c_out x K); overwrites col (stream-ordered after its use above)
    check(cublasSgemmStridedBatched(cublas_.get(), CUBLAS_OP_N, CUBLAS_OP_T, z.cols, z.rows, s.c_out, &kOne,
                                    dy_chunk, z.cols, as_stride(z.out_image), w, z.rows, 0, &kZero, col,
                                    z.cols, as_stride(col_floats), count),
          "conv2d_backward (dx): cublasSgemmStridedBatched");
    col2im(dx + static_cast<std::size_t>(first) * z.in_image, col, s, count, stream_.get());
  }
}

void CudaBackend::linear_forward(const LinearShape& s, const float* x, const float* w, const float* b,
                                 float* y) {
  check_shape(s, "linear_forward");
  if (graphs_.replaying()) return;  // replayed by the step's CUDA graph
  activate();
  // y^T (out x n) = W (out x in) * x^T (in x n)
  check(cublasSgemm(cublas_.get(), CUBLAS_OP_T, CUBLAS_OP_N, s.out, s.n, s.in, &kOne, w, s.in, x, s.in, &kZero,
                    y, s.out),
        "linear_forward: cublasSgemm");
  add_bias(y, b, static_cast<std::size_t>(s.n), s.out, 1, stream_.get());
}

void CudaBackend::linear_backward(const LinearShape& s, const float* x, const float* w, const float* dy,
                                  float* dx, float* dw, float* db) {
  check_shape(s, "linear_backward");
  if (graphs_.replaying()) return;  // replayed by the step's CUDA graph
  activate();
  if (dx != nullptr) {
    // dx^T (in x n) = W^T (in x out) * dy^T (out x n)
    check(cublasSgemm(cublas_.get(), CUBLAS_OP_N, CUBLAS_OP_N, s.in, s.n, s.out, &kOne, w, s.in, dy, s.out,
                      &kZero, dx, s.in),
          "linear_backward (dx): cublasSgemm");
  }
  // dW^T (in x out) = x^T (in x n) * dy (n x out)
  check(cublasSgemm(cublas_.get(), CUBLAS_OP_N, CUBLAS_OP_T, s.in, s.out, s.n, &kOne, x, s.in, dy, s.out, &kZero,
                    dw, s.in),
        "linear_backward (dw): cublasSgemm");
  bias_grad(db, dy, static_cast<std::size_t>(s.n), s.out, 1, stream_.get());
}

}  // namespace pstrain::nn::cuda
