#include "worker/nn/im2col_conv.h"

#include <cblas.h>

#include <cstdint>

#include "worker/nn/shape_checks.h"

namespace pstrain::nn {

void set_blas_threads(int threads) { openblas_set_num_threads(threads); }

void sgemm(bool transpose_a, bool transpose_b, int m, int n, int k, const float* a, const float* b, float* c) {
  cblas_sgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans, transpose_b ? CblasTrans : CblasNoTrans, m, n,
              k, 1.0f, a, transpose_a ? m : k, b, transpose_b ? k : n, 0.0f, c, n);
}

Im2colConv::Im2colConv(const Conv2dShape& shape) : s_(shape), out_h_(shape.out_h()), out_w_(shape.out_w()) {
  check_shape(shape, "im2col conv");
  const std::size_t cols = static_cast<std::size_t>(s_.n) * out_h_ * out_w_;
  col_.resize(static_cast<std::size_t>(s_.c_in) * s_.k_h * s_.k_w * cols);
  rows_.resize(static_cast<std::size_t>(s_.c_out) * cols);
}

// Row (ci, ky, kx) of col holds, for every image and output position, the
// input pixel that kernel tap sees (0 in the padding).
void Im2colConv::im2col(const float* x) {
  const std::size_t plane = static_cast<std::size_t>(out_h_) * out_w_;
  const std::size_t cols = static_cast<std::size_t>(s_.n) * plane;
  float* out = col_.data();
  for (int ci = 0; ci < s_.c_in; ++ci)
    for (int ky = 0; ky < s_.k_h; ++ky)
      for (int kx = 0; kx < s_.k_w; ++kx, out += cols)
        for (int n = 0; n < s_.n; ++n) {
          const float* image = x + (static_cast<std::int64_t>(n) * s_.c_in + ci) * s_.h * s_.w;
          float* dst = out + n * plane;
          for (int oy = 0; oy < out_h_; ++oy) {
            const int iy = oy * s_.stride - s_.pad + ky;
            for (int ox = 0; ox < out_w_; ++ox) {
              const int ix = ox * s_.stride - s_.pad + kx;
              const bool inside = iy >= 0 && iy < s_.h && ix >= 0 && ix < s_.w;
              dst[oy * out_w_ + ox] = inside ? image[iy * s_.w + ix] : 0.0f;
            }
          }
        }
}

void Im2colConv::col2im(float* dx) const {
  const std::size_t plane = static_cast<std::size_t>(out_h_) * out_w_;
  const std::size_t cols = static_cast<std::size_t>(s_.n) * plane;
  for (std::size_t i = 0; i < static_cast<std::size_t>(s_.n) * s_.c_in * s_.h * s_.w; ++i) dx[i] = 0.0f;
  const float* in = col_.data();
  for (int ci = 0; ci < s_.c_in; ++ci)
    for (int ky = 0; ky < s_.k_h; ++ky)
      for (int kx = 0; kx < s_.k_w; ++kx, in += cols)
        for (int n = 0; n < s_.n; ++n) {
          float* image = dx + (static_cast<std::int64_t>(n) * s_.c_in + ci) * s_.h * s_.w;
          const float* src = in + n * plane;
          for (int oy = 0; oy < out_h_; ++oy) {
            const int iy = oy * s_.stride - s_.pad + ky;
            if (iy < 0 || iy >= s_.h) continue;
            for (int ox = 0; ox < out_w_; ++ox) {
              const int ix = ox * s_.stride - s_.pad + kx;
              if (ix >= 0 && ix < s_.w) image[iy * s_.w + ix] += src[oy * out_w_ + ox];
            }
          }
        }
}

void Im2colConv::to_channel_major(const float* nchw) {
  const std::size_t plane = static_cast<std::size_t>(out_h_) * out_w_;
  for (int n = 0; n < s_.n; ++n)
    for (int co = 0; co < s_.c_out; ++co) {
      const float* src = nchw + (static_cast<std::size_t>(n) * s_.c_out + co) * plane;
      float* dst = rows_.data() + (static_cast<std::size_t>(co) * s_.n + n) * plane;
      for (std::size_t p = 0; p < plane; ++p) dst[p] = src[p];
    }
}

void Im2colConv::forward(const float* x, const float* w, const float* b, float* y) {
  const int k = s_.c_in * s_.k_h * s_.k_w;
  const std::size_t plane = static_cast<std::size_t>(out_h_) * out_w_;
  const int cols = static_cast<int>(static_cast<std::size_t>(s_.n) * plane);
  im2col(x);
  sgemm(false, false, s_.c_out, cols, k, w, col_.data(), rows_.data());
  for (int n = 0; n < s_.n; ++n)
    for (int co = 0; co < s_.c_out; ++co) {
      const float* src = rows_.data() + (static_cast<std::size_t>(co) * s_.n + n) * plane;
      float* dst = y + (static_cast<std::size_t>(n) * s_.c_out + co) * plane;
      for (std::size_t p = 0; p < plane; ++p) dst[p] = src[p] + b[co];
    }
}

void Im2colConv::backward(const float* x, const float* w, const float* dy, float* dx, float* dw, float* db) {
  const int k = s_.c_in * s_.k_h * s_.k_w;
  const int cols = s_.n * out_h_ * out_w_;
  to_channel_major(dy);
  for (int co = 0; co < s_.c_out; ++co) {
    double sum = 0.0;
    const float* row = rows_.data() + static_cast<std::size_t>(co) * cols;
    for (int p = 0; p < cols; ++p) sum += row[p];
    db[co] = static_cast<float>(sum);
  }
  im2col(x);
  sgemm(false, true, s_.c_out, k, cols, rows_.data(), col_.data(), dw);
  if (dx != nullptr) {
    sgemm(true, false, k, cols, s_.c_out, w, rows_.data(), col_.data());
    col2im(dx);
  }
}

}  // namespace pstrain::nn
