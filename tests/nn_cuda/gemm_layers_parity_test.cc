// CPU-vs-CUDA parity of the GEMM layers: conv2d and linear, forward and
// backward (dx, dw, db; dx omitted), over shapes covering stride 2, padding,
// non-square inputs and kernels, 1x1 kernels, the Fashion-MNIST model's
// layers and a batch large enough to be split into several im2col chunks.
// Skipped, with the reason printed, when no CUDA device is present.
#include <doctest/doctest.h>

#include <vector>

#include "parity_harness.h"

namespace pstrain::nn::parity {
namespace {

// Both sides are FP32 with different summation orders; indexing bugs give errors of order 1.
constexpr double kGemmTolerance = 1e-4;

std::size_t elems(const Conv2dShape& s, int channels, int h, int w) {
  return static_cast<std::size_t>(s.n) * channels * h * w;
}

void check_conv_parity(Backends& b, const Conv2dShape& s, std::uint32_t seed) {
  const std::size_t x_n = elems(s, s.c_in, s.h, s.w);
  const std::size_t y_n = elems(s, s.c_out, s.out_h(), s.out_w());
  const std::size_t w_n = static_cast<std::size_t>(s.c_out) * s.c_in * s.k_h * s.k_w;
  const std::size_t b_n = static_cast<std::size_t>(s.c_out);
  BufferPair x(b, random_floats(x_n, seed));
  BufferPair w(b, random_floats(w_n, seed + 1, -0.3f, 0.3f));
  BufferPair bias(b, random_floats(b_n, seed + 2));
  BufferPair dy(b, random_floats(y_n, seed + 3));
  // Outputs start as garbage: every method must overwrite, not accumulate.
  BufferPair y(b, std::vector<float>(y_n, 7.0f));
  BufferPair dx(b, std::vector<float>(x_n, 7.0f));
  BufferPair dw(b, std::vector<float>(w_n, 7.0f));
  BufferPair db(b, std::vector<float>(b_n, 7.0f));

  b.cpu->conv2d_forward(s, x.cpu.f32(), w.cpu.f32(), bias.cpu.f32(), y.cpu.f32());
  b.cuda->conv2d_forward(s, x.cuda.f32(), w.cuda.f32(), bias.cuda.f32(), y.cuda.f32());
  check_close("conv y", y.cpu.to_host<float>(), y.cuda.to_host<float>(), kGemmTolerance);

  b.cpu->conv2d_backward(s, x.cpu.f32(), w.cpu.f32(), dy.cpu.f32(), dx.cpu.f32(), dw.cpu.f32(), db.cpu.f32());
  b.cuda->conv2d_backward(s, x.cuda.f32(), w.cuda.f32(), dy.cuda.f32(), dx.cuda.f32(), dw.cuda.f32(),
                          db.cuda.f32());
  const auto dw_cpu = dw.cpu.to_host<float>();
  const auto db_cpu = db.cpu.to_host<float>();
  check_close("conv dx", dx.cpu.to_host<float>(), dx.cuda.to_host<float>(), kGemmTolerance);
  check_close("conv dw", dw_cpu, dw.cuda.to_host<float>(), kGemmTolerance);
  check_close("conv db", db_cpu, db.cuda.to_host<float>(), kGemmTolerance);

  Buffer dw_only(*b.cuda, w_n * sizeof(float));
  Buffer db_only(*b.cuda, b_n * sizeof(float));
  b.cuda->fill(dw_only.f32(), -3.0f, w_n);
  b.cuda->conv2d_backward(s, x.cuda.f32(), w.cuda.f32(), dy.cuda.f32(), nullptr, dw_only.f32(), db_only.f32());
  check_close("conv dw (dx null)", dw_cpu, dw_only.to_host<float>(), kGemmTolerance);
  check_close("conv db (dx null)", db_cpu, db_only.to_host<float>(), kGemmTolerance);
}

void check_linear_parity(Backends& b, const LinearShape& s, std::uint32_t seed) {
  const std::size_t x_n = static_cast<std::size_t>(s.n) * s.in;
  const std::size_t y_n = static_cast<std::size_t>(s.n) * s.out;
  const std::size_t w_n = static_cast<std::size_t>(s.out) * s.in;
  const std::size_t b_n = static_cast<std::size_t>(s.out);
  BufferPair x(b, random_floats(x_n, seed));
  BufferPair w(b, random_floats(w_n, seed + 1, -0.1f, 0.1f));
  BufferPair bias(b, random_floats(b_n, seed + 2));
  BufferPair dy(b, random_floats(y_n, seed + 3));
  BufferPair y(b, std::vector<float>(y_n, 7.0f));
  BufferPair dx(b, std::vector<float>(x_n, 7.0f));
  BufferPair dw(b, std::vector<float>(w_n, 7.0f));
  BufferPair db(b, std::vector<float>(b_n, 7.0f));

  b.cpu->linear_forward(s, x.cpu.f32(), w.cpu.f32(), bias.cpu.f32(), y.cpu.f32());
  b.cuda->linear_forward(s, x.cuda.f32(), w.cuda.f32(), bias.cuda.f32(), y.cuda.f32());
  check_close("linear y", y.cpu.to_host<float>(), y.cuda.to_host<float>(), kGemmTolerance);

  b.cpu->linear_backward(s, x.cpu.f32(), w.cpu.f32(), dy.cpu.f32(), dx.cpu.f32(), dw.cpu.f32(), db.cpu.f32());
  b.cuda->linear_backward(s, x.cuda.f32(), w.cuda.f32(), dy.cuda.f32(), dx.cuda.f32(), dw.cuda.f32(),
                          db.cuda.f32());
  const auto dw_cpu = dw.cpu.to_host<float>();
  check_close("linear dx", dx.cpu.to_host<float>(), dx.cuda.to_host<float>(), kGemmTolerance);
  check_close("linear dw", dw_cpu, dw.cuda.to_host<float>(), kGemmTolerance);
  check_close("linear db", db.cpu.to_host<float>(), db.cuda.to_host<float>(), kGemmTolerance);

  Buffer dw_only(*b.cuda, w_n * sizeof(float));
  Buffer db_only(*b.cuda, b_n * sizeof(float));
  b.cuda->linear_backward(s, x.cuda.f32(), w.cuda.f32(), dy.cuda.f32(), nullptr, dw_only.f32(), db_only.f32());
  check_close("linear dw (dx null)", dw_cpu, dw_only.to_host<float>(), kGemmTolerance);
}

TEST_CASE("conv2d forward/backward: CPU and CUDA agree") {
  auto b = backends_or_skip();
  if (!b) return;
  struct Case {
    const char* label;
    Conv2dShape shape;
  };
  const Case cases[] = {
      {"fmnist conv1 5x5 pad 2", {4, 1, 28, 28, 8, 5, 5, 1, 2}},
      {"fmnist conv2 5x5 pad 2", {4, 32, 14, 14, 64, 5, 5, 1, 2}},
      {"stride 2 pad 1, non-square input", {3, 4, 9, 11, 5, 3, 3, 2, 1}},
      {"stride 2 no pad, 3x2 kernel", {2, 3, 8, 7, 4, 3, 2, 2, 0}},
      {"stride 3 pad 2, 4x4 kernel", {2, 2, 10, 10, 3, 4, 4, 3, 2}},
      {"1x1 kernel", {1, 6, 7, 5, 3, 1, 1, 1, 0}},
      {"kernel covers the padded input", {2, 2, 3, 3, 2, 5, 5, 1, 1}},
  };
  std::uint32_t seed = 100;
  for (const Case& c : cases) {
    CAPTURE(c.label);
    check_conv_parity(*b, c.shape, seed += 10);
  }
}

TEST_CASE("conv2d over a batch split into several im2col chunks: CPU and CUDA agree") {
  auto b = backends_or_skip();
  if (!b) return;
  // 170 images x (K=400) x (P=1024) columns = 69.6M floats, over the backend's
  // 64M-float (256 MiB) workspace limit, so the batch runs in two chunks.
  check_conv_parity(*b, Conv2dShape{170, 16, 32, 32, 2, 5, 5, 1, 2}, 7);
}

TEST_CASE("linear forward/backward: CPU and CUDA agree") {
  auto b = backends_or_skip();
  if (!b) return;
  const LinearShape shapes[] = {{4, 17, 10}, {64, 3136, 128}, {64, 128, 10}, {1, 5, 1}, {33, 1, 7}};
  std::uint32_t seed = 500;
  for (const LinearShape& s : shapes) {
    CAPTURE(s.n);
    CAPTURE(s.in);
    CAPTURE(s.out);
    check_linear_parity(*b, s, seed += 10);
  }
}

// The cuDNN path (builds with cuDNN) against the own im2col kernels, both on the GPU: the
// same convolutions within the GEMM tolerance, and the backend's name says which path it took.
TEST_CASE("conv2d by cuDNN and by the own im2col kernels agree; name() says which ran") {
  auto b = backends_or_skip();
  if (!b) return;
  std::string why_not;
  ComputeOptions own;
  own.cudnn = false;
  auto own_kernels = make_cuda_backend(0, &why_not, own);
  REQUIRE(own_kernels != nullptr);
  CHECK(own_kernels->name().find("own conv kernels (cuDNN not asked for)") != std::string::npos);
#if defined(PSTRAIN_HAVE_CUDNN)
  const bool cudnn = b->cuda->name().find("convolutions by cuDNN") != std::string::npos;
  INFO(b->cuda->name());
  CHECK((cudnn || b->cuda->name().find("another major version") != std::string::npos));
#else
  CHECK(b->cuda->name().find("own conv kernels (built without cuDNN)") != std::string::npos);
#endif
  Backends pair{std::move(own_kernels), std::move(b->cuda)};
  std::uint32_t seed = 300;
  for (const Conv2dShape& s : {Conv2dShape{64, 1, 28, 28, 32, 5, 5, 1, 2}, Conv2dShape{64, 32, 14, 14, 64, 5, 5, 1, 2},
                               Conv2dShape{3, 4, 9, 11, 5, 3, 3, 2, 1}, Conv2dShape{7, 1, 28, 28, 32, 5, 5, 1, 2}}) {
    CAPTURE(s.n);
    CAPTURE(s.c_in);
    check_conv_parity(pair, s, seed += 10);
  }
}

}  // namespace
}  // namespace pstrain::nn::parity

namespace pstrain::nn::parity {
namespace {

// Convolution, bias and ReLU in one cuDNN call (Backend::conv2d_relu_forward) against the CPU's
// convolution then ReLU: within the GEMM tolerance. A shape cuDNN does not fuse leaves y as it
// was (answered false, and the same at the next call); the CPU and the own kernels never fuse.
TEST_CASE("conv2d + ReLU fused by cuDNN: CPU conv then ReLU agree") {
  auto b = backends_or_skip();
  if (!b) return;
  std::uint32_t seed = 500;
  int fused = 0;
  for (const Conv2dShape& s : {Conv2dShape{64, 1, 28, 28, 32, 5, 5, 1, 2}, Conv2dShape{64, 32, 14, 14, 64, 5, 5, 1, 2},
                               Conv2dShape{3, 4, 9, 11, 5, 3, 3, 2, 1}}) {
    CAPTURE(s.c_in);
    const std::size_t y_n = elems(s, s.c_out, s.out_h(), s.out_w());
    BufferPair x(*b, random_floats(elems(s, s.c_in, s.h, s.w), seed += 10));
    BufferPair w(*b, random_floats(static_cast<std::size_t>(s.c_out) * s.c_in * s.k_h * s.k_w, seed + 1, -0.3f, 0.3f));
    BufferPair bias(*b, random_floats(static_cast<std::size_t>(s.c_out), seed + 2));
    BufferPair y(*b, std::vector<float>(y_n, 7.0f));
    CHECK_FALSE(b->cpu->conv2d_relu_forward(s, x.cpu.f32(), w.cpu.f32(), bias.cpu.f32(), y.cpu.f32()));
    b->cpu->conv2d_forward(s, x.cpu.f32(), w.cpu.f32(), bias.cpu.f32(), y.cpu.f32());
    b->cpu->relu_forward(y.cpu.f32(), y.cpu.f32(), y_n);
    const bool did = b->cuda->conv2d_relu_forward(s, x.cuda.f32(), w.cuda.f32(), bias.cuda.f32(), y.cuda.f32());
    CHECK(b->cuda->conv2d_relu_forward(s, x.cuda.f32(), w.cuda.f32(), bias.cuda.f32(), y.cuda.f32()) == did);
    if (did) {
      ++fused;
      check_close("conv+relu y", y.cpu.to_host<float>(), y.cuda.to_host<float>(), kGemmTolerance);
    } else {
      MESSAGE("not fused for this shape: " << b->cuda->name());
      CHECK(y.cuda.to_host<float>() == std::vector<float>(y_n, 7.0f));
    }
  }
#if defined(PSTRAIN_HAVE_CUDNN)
  if (b->cuda->compute_path().conv == "cudnn") CHECK(fused > 0);  // fmnist_cnn's shapes at least
#endif
  ComputeOptions own;
  own.cudnn = false;
  auto own_kernels = make_cuda_backend(0, nullptr, own);
  REQUIRE(own_kernels != nullptr);
  CHECK_FALSE(own_kernels->conv2d_relu_forward(Conv2dShape{2, 1, 8, 8, 4, 3, 3, 1, 1}, nullptr, nullptr, nullptr,
                                               nullptr));
}

}  // namespace
}  // namespace pstrain::nn::parity
