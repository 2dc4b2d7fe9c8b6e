// CPU-vs-CUDA parity of the non-GEMM layers: fill/copy, ReLU, max pooling
// (incl. overlapping windows), dropout (bit-identical masks from the shared
// hash) and softmax cross-entropy (incl. huge logits). Skipped, with the
// reason printed, when no CUDA device is present.
#include <doctest/doctest.h>

#include <vector>

#include "parity_harness.h"

namespace pstrain::nn::parity {
namespace {

// Element-wise ops do the same float operations on both sides: exact.
constexpr double kExact = 0.0;
// Softmax: the CPU computes exp/log in double, the GPU in float.
constexpr double kSoftmaxTolerance = 1e-5;

TEST_CASE("fill, copy and host round trips: CPU and CUDA agree") {
  auto b = backends_or_skip();
  if (!b) return;
  const std::size_t n = 100003;  // not a multiple of any block size
  BufferPair a(*b, random_floats(n, 1));
  BufferPair c(*b, std::vector<float>(n, 0.0f));
  b->cpu->copy(c.cpu.f32(), a.cpu.f32(), n * sizeof(float));
  b->cuda->copy(c.cuda.f32(), a.cuda.f32(), n * sizeof(float));
  check_close("copy", c.cpu.to_host<float>(), c.cuda.to_host<float>(), kExact);
  CHECK(a.cuda.to_host<float>() == random_floats(n, 1));

  b->cpu->fill(a.cpu.f32() + 5, 2.5f, n - 10);
  b->cuda->fill(a.cuda.f32() + 5, 2.5f, n - 10);
  check_close("fill", a.cpu.to_host<float>(), a.cuda.to_host<float>(), kExact);
}

TEST_CASE("relu forward/backward: CPU and CUDA agree") {
  auto b = backends_or_skip();
  if (!b) return;
  const std::size_t n = 70001;
  BufferPair x(*b, random_floats(n, 2));
  BufferPair dy(*b, random_floats(n, 3));
  BufferPair y(*b, std::vector<float>(n, 7.0f));
  BufferPair dx(*b, std::vector<float>(n, 7.0f));
  b->cpu->relu_forward(x.cpu.f32(), y.cpu.f32(), n);
  b->cuda->relu_forward(x.cuda.f32(), y.cuda.f32(), n);
  b->cpu->relu_backward(y.cpu.f32(), dy.cpu.f32(), dx.cpu.f32(), n);
  b->cuda->relu_backward(y.cuda.f32(), dy.cuda.f32(), dx.cuda.f32(), n);
  check_close("relu y", y.cpu.to_host<float>(), y.cuda.to_host<float>(), kExact);
  check_close("relu dx", dx.cpu.to_host<float>(), dx.cuda.to_host<float>(), kExact);
}

TEST_CASE("maxpool forward/backward: CPU and CUDA agree, argmax identical") {
  auto b = backends_or_skip();
  if (!b) return;
  struct Case {
    const char* label;
    PoolShape shape;
  };
  const Case cases[] = {
      {"2x2 stride 2", {4, 3, 28, 28, 2, 2}},
      {"3x3 stride 2 (overlapping)", {2, 3, 9, 9, 3, 2}},
      {"2x2 stride 1 (overlapping)", {1, 2, 5, 6, 2, 1}},
      {"odd input, last row/column unused", {2, 2, 7, 9, 2, 2}},
      {"window = input", {3, 4, 4, 4, 4, 1}},
  };
  std::uint32_t seed = 40;
  for (const Case& c : cases) {
    CAPTURE(c.label);
    const PoolShape& s = c.shape;
    const std::size_t x_n = static_cast<std::size_t>(s.n) * s.c * s.h * s.w;
    const std::size_t y_n = static_cast<std::size_t>(s.n) * s.c * s.out_h() * s.out_w();
    BufferPair x(*b, random_floats(x_n, seed += 3));
    BufferPair dy(*b, random_floats(y_n, seed + 1));
    BufferPair y(*b, std::vector<float>(y_n, 7.0f));
    BufferPair argmax(*b, std::vector<std::int32_t>(y_n, -1));
    BufferPair dx(*b, std::vector<float>(x_n, 7.0f));
    b->cpu->maxpool_forward(s, x.cpu.f32(), y.cpu.f32(), argmax.cpu.i32());
    b->cuda->maxpool_forward(s, x.cuda.f32(), y.cuda.f32(), argmax.cuda.i32());
    check_close("maxpool y", y.cpu.to_host<float>(), y.cuda.to_host<float>(), kExact);
    CHECK(argmax.cpu.to_host<std::int32_t>() == argmax.cuda.to_host<std::int32_t>());
    b->cpu->maxpool_backward(s, dy.cpu.f32(), argmax.cpu.i32(), dx.cpu.f32());
    b->cuda->maxpool_backward(s, dy.cuda.f32(), argmax.cuda.i32(), dx.cuda.f32());
    // Overlapping windows add several dy into one dx in an unspecified order.
    check_close("maxpool dx", dx.cpu.to_host<float>(), dx.cuda.to_host<float>(), 1e-6);
  }
}

TEST_CASE("dropout forward/backward: CPU and CUDA draw the same mask") {
  auto b = backends_or_skip();
  if (!b) return;
  const std::size_t n = 100003;
  BufferPair x(*b, random_floats(n, 5));
  BufferPair dy(*b, random_floats(n, 6));
  for (const float p : {0.0f, 0.25f, 0.5f, 0.9f}) {
    CAPTURE(p);
    const std::uint64_t seed = 0x1234567890ull + static_cast<std::uint64_t>(p * 100.0f);
    BufferPair y(*b, std::vector<float>(n, 7.0f));
    BufferPair mask(*b, std::vector<float>(n, 7.0f));
    BufferPair dx(*b, std::vector<float>(n, 7.0f));
    b->cpu->dropout_forward(x.cpu.f32(), y.cpu.f32(), mask.cpu.f32(), n, p, seed);
    b->cuda->dropout_forward(x.cuda.f32(), y.cuda.f32(), mask.cuda.f32(), n, p, seed);
    const auto mask_cuda = mask.cuda.to_host<float>();
    CHECK(mask.cpu.to_host<float>() == mask_cuda);
    std::size_t dropped = 0;
    for (const float m : mask_cuda) dropped += m == 0.0f ? 1 : 0;
    CHECK(static_cast<double>(dropped) / static_cast<double>(n) == doctest::Approx(p).epsilon(0.02));
    check_close("dropout y", y.cpu.to_host<float>(), y.cuda.to_host<float>(), kExact);
    b->cpu->dropout_backward(dy.cpu.f32(), mask.cpu.f32(), dx.cpu.f32(), n);
    b->cuda->dropout_backward(dy.cuda.f32(), mask.cuda.f32(), dx.cuda.f32(), n);
    check_close("dropout dx", dx.cpu.to_host<float>(), dx.cuda.to_host<float>(), kExact);
  }
}

std::vector<std::int32_t> random_labels(int n, int classes, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::int32_t> dist(0, classes - 1);
  std::vector<std::int32_t> labels(static_cast<std::size_t>(n));
  for (auto& label : labels) label = dist(rng);
  return labels;
}

TEST_CASE("softmax cross-entropy: CPU and CUDA agree on loss, correct count and dlogits") {
  auto b = backends_or_skip();
  if (!b) return;
  struct Case {
    const char* label;
    int n, classes;
    float scale, shift;  // logits = uniform(-1, 1) * scale + shift
  };
  const Case cases[] = {
      {"fmnist batch", 64, 10, 3.0f, 0.0f},
      {"large logits (stability)", 32, 10, 80.0f, 1000.0f},
      {"more classes than a warp", 7, 100, 5.0f, -3.0f},
      {"odd class count", 129, 37, 2.0f, 0.5f},
      {"single class", 5, 1, 1.0f, 0.0f},
  };
  std::uint32_t seed = 900;
  for (const Case& c : cases) {
    CAPTURE(c.label);
    const std::size_t num = static_cast<std::size_t>(c.n) * c.classes;
    auto logits_host = random_floats(num, seed += 2);
    for (float& v : logits_host) v = v * c.scale + c.shift;
    BufferPair logits(*b, logits_host);
    BufferPair labels(*b, random_labels(c.n, c.classes, seed + 1));
    BufferPair dlogits(*b, std::vector<float>(num, 7.0f));
    const auto cpu = b->cpu->softmax_xent(c.n, c.classes, logits.cpu.f32(), labels.cpu.i32(), dlogits.cpu.f32());
    const auto cuda =
        b->cuda->softmax_xent(c.n, c.classes, logits.cuda.f32(), labels.cuda.i32(), dlogits.cuda.f32());
    CHECK(std::isfinite(cuda.loss_sum));
    CHECK(cuda.loss_sum == doctest::Approx(cpu.loss_sum).epsilon(kSoftmaxTolerance));
    CHECK(cuda.correct == cpu.correct);
    check_close("dlogits", dlogits.cpu.to_host<float>(), dlogits.cuda.to_host<float>(), kSoftmaxTolerance);
  }
}

}  // namespace
}  // namespace pstrain::nn::parity
