#include "worker/nn/cpu_ops.h"

#include <cmath>
#include <string>

#include "common/base/errors.h"
#include "worker/nn/dropout_hash.h"

namespace pstrain::nn::cpu {

void relu_forward(const float* x, float* y, std::size_t num_elems) {
  for (std::size_t i = 0; i < num_elems; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void relu_backward(const float* y, const float* dy, float* dx, std::size_t num_elems) {
  for (std::size_t i = 0; i < num_elems; ++i) {
    const float g = dy[i];  // loaded unconditionally so the loop vectorizes
    dx[i] = y[i] > 0.0f ? g : 0.0f;
  }
}

namespace {

// The common 2x2 window with stride 2, two input rows at a time.
void maxpool_forward_2x2(const PoolShape& s, const float* x, float* y, std::int32_t* argmax) {
  const int oh = s.out_h(), ow = s.out_w();
  for (std::int64_t plane = 0; plane < std::int64_t{s.n} * s.c; ++plane) {
    const std::int64_t x_base = plane * s.h * s.w;
    float* y_plane = y + plane * oh * ow;
    std::int32_t* a_plane = argmax + plane * oh * ow;
    for (int i = 0; i < oh; ++i) {
      const std::int64_t top = x_base + std::int64_t{2 * i} * s.w;
      const std::int64_t bottom = top + s.w;
      for (int j = 0; j < ow; ++j) {
        std::int64_t best = top + 2 * j;  // first maximum in row-major window order wins
        if (x[top + 2 * j + 1] > x[best]) best = top + 2 * j + 1;
        if (x[bottom + 2 * j] > x[best]) best = bottom + 2 * j;
        if (x[bottom + 2 * j + 1] > x[best]) best = bottom + 2 * j + 1;
        y_plane[i * ow + j] = x[best];
        a_plane[i * ow + j] = static_cast<std::int32_t>(best);
      }
    }
  }
}

}  // namespace

void maxpool_forward(const PoolShape& s, const float* x, float* y, std::int32_t* argmax) {
  if (s.k == 2 && s.stride == 2) {
    maxpool_forward_2x2(s, x, y, argmax);
    return;
  }
  const int oh = s.out_h(), ow = s.out_w();
  for (std::int64_t plane = 0; plane < std::int64_t{s.n} * s.c; ++plane) {
    const std::int64_t x_base = plane * s.h * s.w;
    const std::int64_t y_base = plane * oh * ow;
    for (int i = 0; i < oh; ++i) {
      for (int j = 0; j < ow; ++j) {
        std::int64_t best = x_base + std::int64_t{i} * s.stride * s.w + j * s.stride;
        for (int di = 0; di < s.k; ++di) {
          const std::int64_t row = x_base + std::int64_t{i * s.stride + di} * s.w + j * s.stride;
          for (int dj = 0; dj < s.k; ++dj) {
            if (x[row + dj] > x[best]) best = row + dj;
          }
        }
        y[y_base + i * ow + j] = x[best];
        argmax[y_base + i * ow + j] = static_cast<std::int32_t>(best);
      }
    }
  }
}

void maxpool_backward(const PoolShape& s, const float* dy, const std::int32_t* argmax, float* dx) {
  const std::int64_t num_in = std::int64_t{s.n} * s.c * s.h * s.w;
  const std::int64_t num_out = std::int64_t{s.n} * s.c * s.out_h() * s.out_w();
  for (std::int64_t i = 0; i < num_in; ++i) dx[i] = 0.0f;
  for (std::int64_t i = 0; i < num_out; ++i) dx[argmax[i]] += dy[i];  // windows may overlap
}

void dropout_forward(const float* x, float* y, float* mask, std::size_t num_elems, float p,
                     std::uint64_t seed) {
  if (!(p >= 0.0f && p < 1.0f)) {
    throw ComputeError("dropout_forward: drop probability " + std::to_string(p) + " is outside [0, 1)");
  }
  const float scale = 1.0f / (1.0f - p);  // as dropout_mask_value computes it
  for (std::size_t i = 0; i < num_elems; ++i) {
    mask[i] = dropout_uniform(seed, i) < p ? 0.0f : scale;
    y[i] = x[i] * mask[i];
  }
}

void dropout_backward(const float* dy, const float* mask, float* dx, std::size_t num_elems) {
  for (std::size_t i = 0; i < num_elems; ++i) dx[i] = dy[i] * mask[i];
}

Backend::XentResult softmax_xent(int n, int classes, const float* logits, const std::int32_t* labels,
                                 float* dlogits) {
  Backend::XentResult result{0.0, 0};
  const float inv_n = 1.0f / static_cast<float>(n);
  for (int r = 0; r < n; ++r) {
    const std::int32_t label = labels[r];
    if (label < 0 || label >= classes) {
      throw ComputeError("softmax_xent: label of sample " + std::to_string(r) + " is " + std::to_string(label) +
                         ", expected 0.." + std::to_string(classes - 1));
    }
    const float* z = logits + std::int64_t{r} * classes;
    float* dz = dlogits + std::int64_t{r} * classes;
    int best = 0;
    for (int c = 1; c < classes; ++c) {
      if (z[c] > z[best]) best = c;
    }
    double sum = 0.0;
    for (int c = 0; c < classes; ++c) sum += std::exp(static_cast<double>(z[c]) - z[best]);
    const double log_sum = std::log(sum);
    result.loss_sum += log_sum - (static_cast<double>(z[label]) - z[best]);
    result.correct += best == label ? 1 : 0;
    for (int c = 0; c < classes; ++c) {
      const double prob = std::exp(static_cast<double>(z[c]) - z[best] - log_sum);
      dz[c] = (static_cast<float>(prob) - (c == label ? 1.0f : 0.0f)) * inv_n;
    }
  }
  return result;
}

}  // namespace pstrain::nn::cpu
