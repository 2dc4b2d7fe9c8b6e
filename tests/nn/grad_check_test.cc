// Finite-difference gradient checks of every layer on the CPU backend:
// d/dx and d/dparams of L = sum_i r_i * y_i (r fixed random), central
// differences evaluated in double from the float32 outputs.
#include <doctest/doctest.h>

#include <numeric>

#include "nn_test_util.h"
#include "worker/nn/param_layers.h"
#include "worker/nn/simple_layers.h"
#include "worker/nn/softmax_xent.h"

namespace pstrain::nn {
namespace {

using testing::check_gradient;
using testing::random_values;

struct GradCheckOptions {
  bool training = false;
  std::uint64_t dropout_seed = 7;
  float eps = 1e-2f;
};

// Checks dx and (if any) the parameter gradients of `layer` at input x.
void check_layer(Backend& backend, Layer& layer, int batch, const std::vector<float>& x_host,
                 GradCheckOptions opt = {}) {
  ParamLayout layout;
  layer.add_params(layout);
  const auto num_params = static_cast<std::size_t>(layout.total_elems());
  DeviceBuffer params = testing::device_copy(backend, random_values(num_params, 11, -0.5f, 0.5f));
  DeviceBuffer grads(backend, num_params * sizeof(float));
  layer.bind(params.f32(), grads.f32());

  const std::size_t num_in = x_host.size();
  const auto num_out = static_cast<std::size_t>(batch * layer.output_dims().num_elems());
  REQUIRE(num_in == static_cast<std::size_t>(batch * layer.input_dims().num_elems()));
  DeviceBuffer x = testing::device_copy(backend, x_host);
  DeviceBuffer y(backend, num_out * sizeof(float));
  const std::vector<float> r = random_values(num_out, 13);
  DeviceBuffer dy = testing::device_copy(backend, r);
  DeviceBuffer dx(backend, num_in * sizeof(float));

  const ForwardContext ctx{batch, opt.training, opt.dropout_seed};
  auto loss = [&] {
    layer.forward(ctx, x.f32(), y.f32());
    double sum = 0.0;
    for (std::size_t i = 0; i < num_out; ++i) sum += static_cast<double>(r[i]) * y.f32()[i];
    return sum;
  };
  loss();
  layer.backward(batch, x.f32(), y.f32(), dy.f32(), dx.f32());
  const std::vector<float> dx_host(dx.f32(), dx.f32() + num_in);
  const std::vector<float> grads_host(grads.f32(), grads.f32() + num_params);

  check_gradient(layer.name() + " dx", x.f32(), num_in, dx_host.data(), loss, opt.eps);
  if (num_params > 0) check_gradient(layer.name() + " dparams", params.f32(), num_params, grads_host.data(), loss, opt.eps);
}

struct ConvCase {
  int n, c_in, h, w, c_out, k, stride, pad;
};

TEST_CASE("conv2d gradients match finite differences (strides 1/2, padding 0/1/2, odd sizes)") {
  auto backend = make_cpu_backend(1);
  const ConvCase cases[] = {
      {2, 3, 7, 6, 4, 3, 1, 1},   // stride 1, pad 1
      {2, 2, 7, 9, 3, 3, 2, 0},   // stride 2, pad 0, odd sizes (last column unused)
      {1, 2, 9, 8, 3, 5, 2, 2},   // stride 2, pad 2
      {2, 1, 6, 6, 8, 5, 1, 2},   // one input channel (first layer)
      {2, 16, 5, 5, 4, 3, 1, 0},  // >= 8 input channels: blocked backward-data path
      {1, 3, 5, 7, 2, 1, 1, 0},   // 1x1 kernel
  };
  for (const ConvCase& c : cases) {
    CAPTURE(c.c_in);
    CAPTURE(c.h);
    CAPTURE(c.stride);
    CAPTURE(c.pad);
    Conv2d conv("conv", Dims{c.c_in, c.h, c.w}, c.c_out, c.k, c.stride, c.pad, WeightInit::kHe, *backend, c.n);
    check_layer(*backend, conv, c.n, random_values(static_cast<std::size_t>(c.n * c.c_in * c.h * c.w), 3));
  }
}

TEST_CASE("linear gradients match finite differences") {
  auto backend = make_cpu_backend(1);
  Linear flat("fc", Dims{7, 1, 1}, 5, WeightInit::kGlorot, *backend, 3);
  check_layer(*backend, flat, 3, random_values(3 * 7, 5));
  Linear from_image("fc_img", Dims{2, 3, 3}, 4, WeightInit::kHe, *backend, 2);  // reads [n, 2, 3, 3] as [n, 18]
  check_layer(*backend, from_image, 2, random_values(2 * 18, 6));
}

TEST_CASE("relu gradients match finite differences away from the kink") {
  auto backend = make_cpu_backend(1);
  ReLU relu(Dims{3, 4, 5}, *backend, 2);
  check_layer(*backend, relu, 2, testing::values_away_from_zero(2 * 60, 8, 0.05f));
}

// Distinct values spaced 0.05 apart (> 2 eps), shuffled: each window has a unique maximum.
std::vector<float> distinct_values(std::size_t n, std::uint64_t seed) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), 0.0f);
  std::mt19937_64 rng(seed);
  for (std::size_t i = n - 1; i > 0; --i) std::swap(v[i], v[static_cast<std::size_t>(rng() % (i + 1))]);
  for (auto& x : v) x = 0.05f * x - 0.025f * static_cast<float>(n);
  return v;
}

TEST_CASE("maxpool gradients match finite differences") {
  auto backend = make_cpu_backend(1);
  MaxPool2d pool(Dims{3, 6, 7}, 2, 2, *backend, 2);  // odd width: last column never pooled
  check_layer(*backend, pool, 2, distinct_values(2 * 3 * 6 * 7, 9));
  MaxPool2d overlapping(Dims{2, 7, 7}, 3, 2, *backend, 2);  // overlapping windows accumulate
  check_layer(*backend, overlapping, 2, distinct_values(2 * 2 * 7 * 7, 10));
}

TEST_CASE("dropout gradients match finite differences with a fixed seed") {
  auto backend = make_cpu_backend(1);
  Dropout drop(Dims{4, 3, 3}, 0.4f, *backend, 3);
  check_layer(*backend, drop, 3, random_values(3 * 36, 12), {true, 1234, 1e-2f});
  check_layer(*backend, drop, 3, random_values(3 * 36, 12), {false, 1234, 1e-2f});  // identity
}

TEST_CASE("flatten gradient is the identity") {
  auto backend = make_cpu_backend(1);
  Flatten flat(Dims{2, 3, 4}, *backend, 2);
  CHECK(flat.output_dims() == Dims{24, 1, 1});
  check_layer(*backend, flat, 2, random_values(48, 14));
}

TEST_CASE("softmax cross-entropy gradient matches finite differences of the mean loss") {
  auto backend = make_cpu_backend(1);
  const int n = 4, classes = 5;
  SoftmaxCrossEntropy xent(classes, *backend);
  DeviceBuffer logits = testing::device_copy(*backend, random_values(n * classes, 15, -3.0f, 3.0f));
  DeviceBuffer labels(*backend, n * sizeof(std::int32_t));
  const std::int32_t label_values[n] = {0, 4, 2, 2};
  labels.upload<std::int32_t>(label_values);
  DeviceBuffer dlogits(*backend, n * classes * sizeof(float));
  DeviceBuffer scratch(*backend, n * classes * sizeof(float));
  xent.forward_backward(n, logits.f32(), labels.as<std::int32_t>(), dlogits.f32());
  auto mean_loss = [&] {
    return xent.forward_backward(n, logits.f32(), labels.as<std::int32_t>(), scratch.f32()).loss_sum / n;
  };
  check_gradient("softmax_xent dlogits", logits.f32(), n * classes, dlogits.f32(), mean_loss, 1e-3f, 1e-5, 2e-3);
}

}  // namespace
}  // namespace pstrain::nn
