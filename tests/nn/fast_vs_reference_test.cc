// The CPU backend's fast paths (oneDNN convolution and inner product) against
// the naive reference loops, on assorted shapes including the benchmark
// CNN's layers and ones that select different oneDNN layouts.
#include <doctest/doctest.h>

#include "nn_test_util.h"
#include "worker/nn/im2col_conv.h"
#include "worker/nn/reference_ops.h"

namespace pstrain::nn {
namespace {

using testing::check_close;
using testing::random_values;

constexpr double kTolerance = 2e-5;  // relative to the largest reference value

void compare_conv(Backend& backend, const Conv2dShape& s, bool need_dx) {
  CAPTURE(s.n);
  CAPTURE(s.c_in);
  CAPTURE(s.c_out);
  CAPTURE(s.h);
  CAPTURE(s.k_h);
  CAPTURE(s.stride);
  CAPTURE(s.pad);
  const auto nx = static_cast<std::size_t>(s.n * s.c_in * s.h * s.w);
  const auto nw = static_cast<std::size_t>(s.c_out * s.c_in * s.k_h * s.k_w);
  const auto ny = static_cast<std::size_t>(s.n * s.c_out * s.out_h() * s.out_w());
  const auto nb = static_cast<std::size_t>(s.c_out);
  const auto x = random_values(nx, 1), w = random_values(nw, 2), b = random_values(nb, 3), dy = random_values(ny, 4);
  std::vector<float> y_ref(ny), dx_ref(nx), dw_ref(nw), db_ref(nb);
  reference::conv2d_forward(s, x.data(), w.data(), b.data(), y_ref.data());
  reference::conv2d_backward(s, x.data(), w.data(), dy.data(), dx_ref.data(), dw_ref.data(), db_ref.data());

  DeviceBuffer dx_buf(backend, nx * sizeof(float)), dw_buf(backend, nw * sizeof(float));
  DeviceBuffer db_buf(backend, nb * sizeof(float)), y_buf(backend, ny * sizeof(float));
  DeviceBuffer x_buf = testing::device_copy(backend, x), w_buf = testing::device_copy(backend, w);
  DeviceBuffer b_buf = testing::device_copy(backend, b), dy_buf = testing::device_copy(backend, dy);
  for (int repeat = 0; repeat < 2; ++repeat) {  // second call reuses the cached primitives
    backend.conv2d_forward(s, x_buf.f32(), w_buf.f32(), b_buf.f32(), y_buf.f32());
    backend.conv2d_backward(s, x_buf.f32(), w_buf.f32(), dy_buf.f32(), need_dx ? dx_buf.f32() : nullptr,
                            dw_buf.f32(), db_buf.f32());
    check_close("conv y", y_buf.f32(), y_ref.data(), ny, kTolerance);
    if (need_dx) check_close("conv dx", dx_buf.f32(), dx_ref.data(), nx, kTolerance);
    check_close("conv dw", dw_buf.f32(), dw_ref.data(), nw, kTolerance);
    check_close("conv db", db_buf.f32(), db_ref.data(), nb, kTolerance);
  }
}

TEST_CASE("oneDNN convolution matches the reference loops") {
  auto backend = make_cpu_backend(2);
  compare_conv(*backend, Conv2dShape{4, 1, 28, 28, 32, 5, 5, 1, 2}, false);   // fmnist conv1
  compare_conv(*backend, Conv2dShape{2, 32, 14, 14, 64, 5, 5, 1, 2}, true);   // fmnist conv2
  compare_conv(*backend, Conv2dShape{3, 8, 14, 14, 16, 3, 3, 1, 1}, true);    // small_cnn conv2
  compare_conv(*backend, Conv2dShape{2, 3, 11, 9, 5, 3, 3, 2, 1}, true);      // stride 2, odd sizes
  compare_conv(*backend, Conv2dShape{2, 17, 8, 7, 20, 3, 3, 2, 0}, true);     // channels not a multiple of 16
  compare_conv(*backend, Conv2dShape{1, 4, 6, 6, 4, 2, 3, 1, 1}, true);       // non-square kernel
}

void compare_linear(Backend& backend, const LinearShape& s, bool need_dx) {
  CAPTURE(s.n);
  CAPTURE(s.in);
  CAPTURE(s.out);
  const auto nx = static_cast<std::size_t>(s.n * s.in), nw = static_cast<std::size_t>(s.out * s.in);
  const auto ny = static_cast<std::size_t>(s.n * s.out), nb = static_cast<std::size_t>(s.out);
  const auto x = random_values(nx, 5), w = random_values(nw, 6), b = random_values(nb, 7), dy = random_values(ny, 8);
  std::vector<float> y_ref(ny), dx_ref(nx), dw_ref(nw), db_ref(nb);
  reference::linear_forward(s, x.data(), w.data(), b.data(), y_ref.data());
  reference::linear_backward(s, x.data(), w.data(), dy.data(), dx_ref.data(), dw_ref.data(), db_ref.data());

  DeviceBuffer x_buf = testing::device_copy(backend, x), w_buf = testing::device_copy(backend, w);
  DeviceBuffer b_buf = testing::device_copy(backend, b), dy_buf = testing::device_copy(backend, dy);
  DeviceBuffer y_buf(backend, ny * sizeof(float)), dx_buf(backend, nx * sizeof(float));
  DeviceBuffer dw_buf(backend, nw * sizeof(float)), db_buf(backend, nb * sizeof(float));
  backend.linear_forward(s, x_buf.f32(), w_buf.f32(), b_buf.f32(), y_buf.f32());
  backend.linear_backward(s, x_buf.f32(), w_buf.f32(), dy_buf.f32(), need_dx ? dx_buf.f32() : nullptr, dw_buf.f32(),
                          db_buf.f32());
  check_close("linear y", y_buf.f32(), y_ref.data(), ny, kTolerance);
  if (need_dx) check_close("linear dx", dx_buf.f32(), dx_ref.data(), nx, kTolerance);
  check_close("linear dw", dw_buf.f32(), dw_ref.data(), nw, kTolerance);
  check_close("linear db", db_buf.f32(), db_ref.data(), nb, kTolerance);
}

TEST_CASE("oneDNN inner product matches the reference loops") {
  auto backend = make_cpu_backend(2);
  compare_linear(*backend, LinearShape{8, 3136, 1024}, true);  // fmnist fc1
  compare_linear(*backend, LinearShape{8, 1024, 10}, true);    // fmnist fc2
  compare_linear(*backend, LinearShape{5, 13, 7}, true);
  compare_linear(*backend, LinearShape{1, 6, 3}, false);
}

TEST_CASE("im2col + SGEMM convolution (the benchmark's baseline) matches the reference loops") {
  set_blas_threads(1);
  const Conv2dShape shapes[] = {{2, 3, 11, 9, 5, 3, 3, 2, 1}, {2, 32, 14, 14, 64, 5, 5, 1, 2}, {3, 1, 8, 8, 4, 5, 5, 1, 2}};
  for (const Conv2dShape& s : shapes) {
    CAPTURE(s.c_in);
    const auto nx = static_cast<std::size_t>(s.n * s.c_in * s.h * s.w);
    const auto nw = static_cast<std::size_t>(s.c_out * s.c_in * s.k_h * s.k_w);
    const auto ny = static_cast<std::size_t>(s.n * s.c_out * s.out_h() * s.out_w());
    const auto nb = static_cast<std::size_t>(s.c_out);
    const auto x = random_values(nx, 31), w = random_values(nw, 32), b = random_values(nb, 33);
    const auto dy = random_values(ny, 34);
    std::vector<float> y_ref(ny), dx_ref(nx), dw_ref(nw), db_ref(nb), y(ny), dx(nx), dw(nw), db(nb);
    reference::conv2d_forward(s, x.data(), w.data(), b.data(), y_ref.data());
    reference::conv2d_backward(s, x.data(), w.data(), dy.data(), dx_ref.data(), dw_ref.data(), db_ref.data());
    Im2colConv conv(s);
    conv.forward(x.data(), w.data(), b.data(), y.data());
    conv.backward(x.data(), w.data(), dy.data(), dx.data(), dw.data(), db.data());
    check_close("im2col y", y.data(), y_ref.data(), ny, kTolerance);
    check_close("im2col dx", dx.data(), dx_ref.data(), nx, kTolerance);
    check_close("im2col dw", dw.data(), dw_ref.data(), nw, kTolerance);
    check_close("im2col db", db.data(), db_ref.data(), nb, kTolerance);
  }
}

TEST_CASE("the backend gives the same results with 1 and 2 threads") {
  auto one = make_cpu_backend(1);
  auto two = make_cpu_backend(2);
  const Conv2dShape s{4, 32, 14, 14, 64, 5, 5, 1, 2};
  const auto x = random_values(static_cast<std::size_t>(4 * 32 * 14 * 14), 21);
  const auto w = random_values(static_cast<std::size_t>(64 * 32 * 25), 22);
  const auto b = random_values(64, 23);
  std::vector<float> y1(static_cast<std::size_t>(4 * 64 * 14 * 14)), y2(y1.size());
  one->conv2d_forward(s, x.data(), w.data(), b.data(), y1.data());  // CPU "device" memory is host memory
  two->conv2d_forward(s, x.data(), w.data(), b.data(), y2.data());
  check_close("conv y, 1 vs 2 threads", y1.data(), y2.data(), y1.size(), 1e-6);
}

}  // namespace
}  // namespace pstrain::nn
