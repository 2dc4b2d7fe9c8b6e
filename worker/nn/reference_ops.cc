#include "worker/nn/reference_ops.h"

#include <cstdint>
#include <vector>

namespace pstrain::nn::reference {
namespace {

// Index helpers for the NCHW / OIHW layouts.
std::int64_t at4(int a, int b, int c, int d, int nb, int nc, int nd) {
  return ((std::int64_t{a} * nb + b) * nc + c) * nd + d;
}

// Calls fn(n, co, oy, ox, ci, ky, kx, iy, ix) for every (output, tap) pair
// whose input position lies inside the (unpadded) input.
template <class Fn>
void for_each_tap(const Conv2dShape& s, Fn&& fn) {
  const int oh = s.out_h(), ow = s.out_w();
  for (int n = 0; n < s.n; ++n)
    for (int co = 0; co < s.c_out; ++co)
      for (int oy = 0; oy < oh; ++oy)
        for (int ox = 0; ox < ow; ++ox)
          for (int ci = 0; ci < s.c_in; ++ci)
            for (int ky = 0; ky < s.k_h; ++ky)
              for (int kx = 0; kx < s.k_w; ++kx) {
                const int iy = oy * s.stride - s.pad + ky;
                const int ix = ox * s.stride - s.pad + kx;
                if (iy >= 0 && iy < s.h && ix >= 0 && ix < s.w) fn(n, co, oy, ox, ci, ky, kx, iy, ix);
              }
}

}  // namespace

void conv2d_forward(const Conv2dShape& s, const float* x, const float* w, const float* b, float* y) {
  const int oh = s.out_h(), ow = s.out_w();
  std::vector<double> acc(static_cast<std::size_t>(std::int64_t{s.n} * s.c_out * oh * ow), 0.0);
  for_each_tap(s, [&](int n, int co, int oy, int ox, int ci, int ky, int kx, int iy, int ix) {
    acc[at4(n, co, oy, ox, s.c_out, oh, ow)] +=
        double{x[at4(n, ci, iy, ix, s.c_in, s.h, s.w)]} * w[at4(co, ci, ky, kx, s.c_in, s.k_h, s.k_w)];
  });
  for (std::size_t i = 0; i < acc.size(); ++i) {
    const int co = static_cast<int>((i / (static_cast<std::size_t>(oh) * ow)) % s.c_out);
    y[i] = static_cast<float>(acc[i] + b[co]);
  }
}

void conv2d_backward(const Conv2dShape& s, const float* x, const float* w, const float* dy, float* dx, float* dw,
                     float* db) {
  const int oh = s.out_h(), ow = s.out_w();
  std::vector<double> dx_acc(static_cast<std::size_t>(std::int64_t{s.n} * s.c_in * s.h * s.w), 0.0);
  std::vector<double> dw_acc(static_cast<std::size_t>(std::int64_t{s.c_out} * s.c_in * s.k_h * s.k_w), 0.0);
  std::vector<double> db_acc(static_cast<std::size_t>(s.c_out), 0.0);
  for_each_tap(s, [&](int n, int co, int oy, int ox, int ci, int ky, int kx, int iy, int ix) {
    const double g = dy[at4(n, co, oy, ox, s.c_out, oh, ow)];
    dx_acc[at4(n, ci, iy, ix, s.c_in, s.h, s.w)] += g * w[at4(co, ci, ky, kx, s.c_in, s.k_h, s.k_w)];
    dw_acc[at4(co, ci, ky, kx, s.c_in, s.k_h, s.k_w)] += g * x[at4(n, ci, iy, ix, s.c_in, s.h, s.w)];
  });
  for (int n = 0; n < s.n; ++n)
    for (int co = 0; co < s.c_out; ++co)
      for (int p = 0; p < oh * ow; ++p) db_acc[co] += dy[at4(n, co, 0, p, s.c_out, 1, oh * ow)];
  if (dx != nullptr) {
    for (std::size_t i = 0; i < dx_acc.size(); ++i) dx[i] = static_cast<float>(dx_acc[i]);
  }
  for (std::size_t i = 0; i < dw_acc.size(); ++i) dw[i] = static_cast<float>(dw_acc[i]);
  for (std::size_t i = 0; i < db_acc.size(); ++i) db[i] = static_cast<float>(db_acc[i]);
}

void linear_forward(const LinearShape& s, const float* x, const float* w, const float* b, float* y) {
  for (int n = 0; n < s.n; ++n)
    for (int o = 0; o < s.out; ++o) {
      double acc = b[o];
      for (int i = 0; i < s.in; ++i) acc += double{x[std::int64_t{n} * s.in + i]} * w[std::int64_t{o} * s.in + i];
      y[std::int64_t{n} * s.out + o] = static_cast<float>(acc);
    }
}

void linear_backward(const LinearShape& s, const float* x, const float* w, const float* dy, float* dx, float* dw,
                     float* db) {
  if (dx != nullptr) {
    for (int n = 0; n < s.n; ++n)
      for (int i = 0; i < s.in; ++i) {
        double acc = 0.0;
        for (int o = 0; o < s.out; ++o) acc += double{dy[std::int64_t{n} * s.out + o]} * w[std::int64_t{o} * s.in + i];
        dx[std::int64_t{n} * s.in + i] = static_cast<float>(acc);
      }
  }
  for (int o = 0; o < s.out; ++o) {
    double bias_acc = 0.0;
    for (int n = 0; n < s.n; ++n) bias_acc += dy[std::int64_t{n} * s.out + o];
    db[o] = static_cast<float>(bias_acc);
    for (int i = 0; i < s.in; ++i) {
      double acc = 0.0;
      for (int n = 0; n < s.n; ++n) acc += double{dy[std::int64_t{n} * s.out + o]} * x[std::int64_t{n} * s.in + i];
      dw[std::int64_t{o} * s.in + i] = static_cast<float>(acc);
    }
  }
}

}  // namespace pstrain::nn::reference
