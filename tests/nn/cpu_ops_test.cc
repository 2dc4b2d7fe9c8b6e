// The CPU backend's plain-loop operations: exact semantics on hand-made
// inputs and every validation rule's error text.
#include <doctest/doctest.h>

#include <cmath>

#include "common/base/errors.h"
#include "nn_test_util.h"
#include "worker/nn/dropout_hash.h"

namespace pstrain::nn {
namespace {

TEST_CASE("relu forward and backward") {
  auto backend = make_cpu_backend(1);
  const float x[] = {-2.0f, 0.0f, 3.0f, -0.5f, 1.5f};
  float y[5], dx[5];
  const float dy[] = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f};
  backend->relu_forward(x, y, 5);
  CHECK(std::vector<float>(y, y + 5) == std::vector<float>{0.0f, 0.0f, 3.0f, 0.0f, 1.5f});
  backend->relu_backward(y, dy, dx, 5);
  CHECK(std::vector<float>(dx, dx + 5) == std::vector<float>{0.0f, 0.0f, 3.0f, 0.0f, 5.0f});
}

TEST_CASE("maxpool argmax is the flat index into the whole input") {
  auto backend = make_cpu_backend(1);
  const PoolShape s{2, 1, 2, 4, 2, 2};  // two samples of 2x4 -> 1x2 each
  const float x[] = {1, 5, 2, 0,  //
                     3, 4, 8, 7,  //
                     9, 0, 0, 1,  //
                     0, 0, 2, 6};
  float y[4];
  std::int32_t argmax[4];
  backend->maxpool_forward(s, x, y, argmax);
  CHECK(std::vector<float>(y, y + 4) == std::vector<float>{5, 8, 9, 6});
  CHECK(std::vector<std::int32_t>(argmax, argmax + 4) == std::vector<std::int32_t>{1, 6, 8, 15});
  const float dy[] = {1, 2, 3, 4};
  float dx[16];
  backend->maxpool_backward(s, dy, argmax, dx);
  std::vector<float> want(16, 0.0f);
  want[1] = 1;
  want[6] = 2;
  want[8] = 3;
  want[15] = 4;
  CHECK(std::vector<float>(dx, dx + 16) == want);
}

TEST_CASE("dropout draws its mask from the shared hash") {
  auto backend = make_cpu_backend(1);
  const std::size_t n = 20000;
  std::vector<float> x(n, 2.0f), y(n), mask(n), again(n);
  const float p = 0.4f;
  backend->dropout_forward(x.data(), y.data(), mask.data(), n, p, 99);
  std::size_t dropped = 0, wrong = 0;
  for (std::size_t i = 0; i < n; ++i) {
    wrong += mask[i] == dropout_mask_value(99, i, p) && y[i] == 2.0f * mask[i] ? 0 : 1;
    dropped += mask[i] == 0.0f ? 1 : 0;
  }
  CHECK(wrong == 0);
  CHECK(std::abs(static_cast<double>(dropped) / n - 0.4) < 0.02);
  backend->dropout_forward(x.data(), again.data(), mask.data(), n, p, 100);
  CHECK(again != y);  // another seed, another mask
  std::vector<float> dy(n, 1.0f), dx(n);
  backend->dropout_backward(dy.data(), mask.data(), dx.data(), n);
  CHECK(dx == mask);
}

TEST_CASE("dropout rejects a drop probability outside [0, 1)") {
  auto backend = make_cpu_backend(1);
  float x = 1.0f, y = 0.0f, mask = 0.0f;
  CHECK_THROWS_WITH_AS(backend->dropout_forward(&x, &y, &mask, 1, 1.0f, 1),
                       "dropout_forward: drop probability 1.000000 is outside [0, 1)", ComputeError);
}

TEST_CASE("softmax cross-entropy values") {
  auto backend = make_cpu_backend(1);
  const float logits[] = {0, 0, 0, 0,  //
                          10, 0, 0, 0};
  const std::int32_t labels[] = {2, 0};
  float dlogits[8];
  const auto r = backend->softmax_xent(2, 4, logits, labels, dlogits);
  const double second = std::log(1.0 + 3.0 * std::exp(-10.0));
  CHECK(r.loss_sum == doctest::Approx(std::log(4.0) + second).epsilon(1e-12));
  CHECK(r.correct == 1);  // ties pick the first class (0), label 2 is wrong; the second is right
  CHECK(dlogits[0] == doctest::Approx(0.25 / 2));
  CHECK(dlogits[2] == doctest::Approx(-0.75 / 2));
}

TEST_CASE("softmax cross-entropy rejects out-of-range labels and empty shapes") {
  auto backend = make_cpu_backend(1);
  const float logits[] = {0, 0, 0};
  float dlogits[3];
  const std::int32_t bad[] = {3};
  CHECK_THROWS_WITH_AS(backend->softmax_xent(1, 3, logits, bad, dlogits),
                       "softmax_xent: label of sample 0 is 3, expected 0..2", ComputeError);
  CHECK_THROWS_WITH_AS(backend->softmax_xent(0, 3, logits, bad, dlogits),
                       "softmax_xent: n=0 classes=3: both must be positive", ComputeError);
}

TEST_CASE("shape validation names the operation and the shape") {
  auto backend = make_cpu_backend(1);
  float buf[64] = {};
  std::int32_t idx[64] = {};
  CHECK_THROWS_WITH_AS(backend->conv2d_forward(Conv2dShape{1, 1, 4, 4, 1, 5, 5, 1, 0}, buf, buf, buf, buf),
                       "conv2d_forward [n=1 c_in=1 h=4 w=4 c_out=1 k=5x5 stride=1 pad=0]: kernel 5x5 larger than "
                       "padded input 4x4",
                       ComputeError);
  CHECK_THROWS_WITH_AS(backend->conv2d_backward(Conv2dShape{0, 1, 4, 4, 1, 3, 3, 1, 0}, buf, buf, buf, buf, buf, buf),
                       "conv2d_backward [n=0 c_in=1 h=4 w=4 c_out=1 k=3x3 stride=1 pad=0]: every dimension must be "
                       "positive",
                       ComputeError);
  CHECK_THROWS_WITH_AS(backend->conv2d_forward(Conv2dShape{1, 1, 4, 4, 1, 3, 3, 0, 1}, buf, buf, buf, buf),
                       "conv2d_forward [n=1 c_in=1 h=4 w=4 c_out=1 k=3x3 stride=0 pad=1]: stride must be positive and "
                       "pad non-negative",
                       ComputeError);
  CHECK_THROWS_WITH_AS(backend->conv2d_forward(Conv2dShape{1, 1, 4, 4, 1, 3, 3, 1, 3}, buf, buf, buf, buf),
                       "conv2d_forward [n=1 c_in=1 h=4 w=4 c_out=1 k=3x3 stride=1 pad=3]: pad must be smaller than "
                       "the kernel",
                       ComputeError);
  CHECK_THROWS_WITH_AS(backend->conv2d_forward(Conv2dShape{1 << 16, 1 << 10, 64, 64, 1, 3, 3, 1, 0}, buf, buf, buf, buf),
                       doctest::Contains("tensor too large"), ComputeError);
  CHECK_THROWS_WITH_AS(backend->maxpool_forward(PoolShape{1, 1, 2, 2, 3, 1}, buf, buf, idx),
                       "maxpool_forward [n=1 c=1 h=2 w=2 k=3 stride=1]: window 3 larger than input 2x2", ComputeError);
  CHECK_THROWS_WITH_AS(backend->maxpool_backward(PoolShape{1, 1, 2, 2, 2, 0}, buf, idx, buf),
                       "maxpool_backward [n=1 c=1 h=2 w=2 k=2 stride=0]: every dimension, the window and the stride "
                       "must be positive",
                       ComputeError);
  CHECK_THROWS_WITH_AS(backend->linear_forward(LinearShape{2, 0, 3}, buf, buf, buf, buf),
                       "linear_forward [n=2 in=0 out=3]: every dimension must be positive", ComputeError);
  CHECK_THROWS_WITH_AS(backend->linear_backward(LinearShape{1 << 20, 1 << 12, 3}, buf, buf, buf, buf, buf, buf),
                       "linear_backward [n=1048576 in=4096 out=3]: tensor too large (more than 2^31-1 elements)",
                       ComputeError);
}

TEST_CASE("memory: allocate, copy, fill") {
  auto backend = make_cpu_backend(1);
  DeviceBuffer a(*backend, 10 * sizeof(float)), b(*backend, 10 * sizeof(float));
  CHECK(reinterpret_cast<std::uintptr_t>(a.f32()) % 64 == 0);
  backend->fill(a.f32(), 1.5f, 10);
  backend->copy(b.f32(), a.f32(), 10 * sizeof(float));
  std::vector<float> host(10);
  b.download<float>(host);
  CHECK(host == std::vector<float>(10, 1.5f));
  DeviceBuffer moved = std::move(b);
  CHECK(b.empty());
  CHECK(moved.num_elems<float>() == 10);
  std::vector<float> too_many(11);
  CHECK_THROWS_WITH_AS(moved.upload<float>(too_many),
                       "device buffer upload: elements [0, 11) of 4 bytes exceed the buffer's 40 bytes", ComputeError);
  CHECK_THROWS_WITH_AS(moved.download<float>(std::span<float>(host), 5),
                       "device buffer download: elements [5, 15) of 4 bytes exceed the buffer's 40 bytes",
                       ComputeError);
}

}  // namespace
}  // namespace pstrain::nn
