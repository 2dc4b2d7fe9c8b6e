// The CUDA backend's factory and validation: nullptr plus a one-line reason
// when no device is usable (checked against /dev/nvidiactl, so on a GPU-less
// machine the fallback itself is tested), the host-side argument checks
// (run everywhere CUDA support is built), and, with a device, that invalid
// input is rejected with the same text as the CPU backend and leaves the
// backend usable.
#include <doctest/doctest.h>

#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "common/base/errors.h"
#include "parity_harness.h"
#include "tests/support/throw_text.h"
#if defined(PSTRAIN_HAVE_CUDA)
#include "worker/nn/cuda/arg_checks.h"
#endif

namespace pstrain::nn::parity {
namespace {

bool driver_device_node_present() { return std::filesystem::exists("/dev/nvidiactl"); }

TEST_CASE("make_cuda_backend returns nullptr with a one-line reason when no device is usable") {
  std::string why_not;
  auto backend = make_cuda_backend(0, &why_not);
  if (!driver_device_node_present()) CHECK(backend == nullptr);
  if (backend == nullptr) {
    MESSAGE("make_cuda_backend(0): " << why_not);
    CHECK_FALSE(why_not.empty());
    CHECK(why_not.find('\n') == std::string::npos);
#if defined(PSTRAIN_HAVE_CUDA)
    const bool names_cause = why_not.find("no CUDA device") != std::string::npos ||
                             why_not.find("unusable") != std::string::npos;
    CHECK(names_cause);
#else
    CHECK(why_not.find("without CUDA") != std::string::npos);
#endif
    CHECK(make_cuda_backend(0, nullptr) == nullptr);  // a null why_not is allowed
  } else {
    CHECK(backend->is_cuda());
    const std::string name = backend->name();
    MESSAGE("make_cuda_backend(0): " << name);
    CHECK(name.rfind("cuda:0 (", 0) == 0);
    CHECK(name.find(", sm_") != std::string::npos);
    // The conv path and precision it names (start-up line, summary.json's "compute").
    const ComputePath path = backend->compute_path();
#if defined(PSTRAIN_HAVE_CUDNN)
    CHECK((path.conv == "cudnn" || path.detail.find("another major version") != std::string::npos));
#else
    CHECK(path.conv == "cuda-im2col");
#endif
    CHECK(path.precision == "fp32");
    CHECK(name.find(path.detail + ", fp32)") != std::string::npos);
    ComputeOptions tf32;
    tf32.tf32 = true;
    CHECK(make_cuda_backend(0, nullptr, tf32)->compute_path().precision == "tf32");
    ComputeOptions own;
    own.cudnn = false;
    CHECK(make_cuda_backend(0, nullptr, own)->compute_path().conv == "cuda-im2col");
  }
}

TEST_CASE("make_cuda_backend refuses a device index that does not exist") {
  for (const int index : {-1, 1000}) {
    CAPTURE(index);
    std::string why_not;
    CHECK(make_cuda_backend(index, &why_not) == nullptr);
    CHECK_FALSE(why_not.empty());
#if defined(PSTRAIN_HAVE_CUDA)
    const bool names_cause = why_not.find("no CUDA device") != std::string::npos ||
                             why_not.find("CUDA device " + std::to_string(index) + " requested") != std::string::npos;
    CHECK(names_cause);
#endif
  }
}

#if defined(PSTRAIN_HAVE_CUDA)
TEST_CASE("CUDA argument checks reject bad input with the CPU backend's wording") {
  using namespace cuda;
  CHECK_THROWS_WITH_AS(check_dropout_p(1.0f, "dropout_forward"),
                       "dropout_forward: drop probability 1.000000 is outside [0, 1)", ComputeError);
  CHECK_THROWS_WITH_AS(check_dropout_p(-0.5f, "dropout_forward"),
                       "dropout_forward: drop probability -0.500000 is outside [0, 1)", ComputeError);
  CHECK_THROWS_AS(check_dropout_p(std::numeric_limits<float>::quiet_NaN(), "dropout_forward"), ComputeError);
  CHECK_NOTHROW(check_dropout_p(0.0f, "dropout_forward"));
  CHECK_NOTHROW(check_dropout_p(0.999f, "dropout_forward"));


  const float velocity = 0.0f;
  CHECK_THROWS_WITH_AS(check_sgd_velocity(nullptr, 0.9f, "sgd_step"),
                       "sgd_step: momentum 0.900000 needs a velocity buffer, got null", ComputeError);
  CHECK_NOTHROW(check_sgd_velocity(nullptr, 0.0f, "sgd_step"));
  CHECK_NOTHROW(check_sgd_velocity(&velocity, 0.9f, "sgd_step"));

  CHECK_THROWS_WITH_AS(check_xent_shape(4, 0, "softmax_xent"), "softmax_xent: n=4 classes=0: both must be positive",
                       ComputeError);
  CHECK_THROWS_WITH_AS(check_xent_shape(0, 10, "softmax_xent"), "softmax_xent: n=0 classes=10: both must be positive",
                       ComputeError);
  CHECK_NOTHROW(check_xent_shape(1, 1, "softmax_xent"));

  CHECK(bad_label_message(3, 12, 10) == "softmax_xent: label of sample 3 is 12, expected 0..9");
}
#endif

using pstrain::test::thrown_text;  // tests/support/throw_text.h

TEST_CASE("CUDA backend rejects invalid input like the CPU backend and stays usable") {
  auto b = backends_or_skip();
  if (!b) return;
  const int n = 4, classes = 10;
  BufferPair logits(*b, random_floats(static_cast<std::size_t>(n) * classes, 1));
  BufferPair bad_labels(*b, std::vector<std::int32_t>{1, 2, 3, 12});
  BufferPair good_labels(*b, std::vector<std::int32_t>{1, 2, 3, 4});
  BufferPair scratch(*b, std::vector<float>(4096, 0.0f));

  auto both = [&](const char* what, auto call) {
    CAPTURE(what);
    const std::string cpu_error = thrown_text<ComputeError>([&] { call(*b->cpu, scratch.cpu.f32()); });
    const std::string cuda_error = thrown_text<ComputeError>([&] { call(*b->cuda, scratch.cuda.f32()); });
    CHECK_FALSE(cuda_error.empty());
    CHECK(cuda_error == cpu_error);
  };
  both("bad label", [&](Backend& be, float* f) {
    be.softmax_xent(n, classes, logits.on(be).f32(), bad_labels.on(be).i32(), f);
  });
  both("empty batch", [&](Backend& be, float* f) {
    be.softmax_xent(0, classes, logits.on(be).f32(), good_labels.on(be).i32(), f);
  });
  both("dropout p = 1", [](Backend& be, float* f) { be.dropout_forward(f, f + 10, f + 20, 10, 1.0f, 1); });
  both("sgd without velocity", [](Backend& be, float* f) {
    be.sgd_step(f, f + 10, nullptr, 10, update::sgd_coefficients(0.1, 0.9, 0.0, false));
  });
  both("conv kernel larger than input", [](Backend& be, float* f) {
    be.conv2d_forward(Conv2dShape{1, 1, 3, 3, 1, 5, 5, 1, 0}, f, f + 100, f + 200, f + 300);
  });
  both("pool window larger than input", [](Backend& be, float* f) {
    be.maxpool_forward(PoolShape{1, 1, 2, 2, 3, 1}, f, f + 100, reinterpret_cast<std::int32_t*>(f + 200));
  });
  both("linear with zero outputs", [](Backend& be, float* f) {
    be.linear_forward(LinearShape{2, 3, 0}, f, f + 100, f + 200, f + 300);
  });

  // Still usable after the errors.
  BufferPair dlogits(*b, std::vector<float>(static_cast<std::size_t>(n) * classes, 0.0f));
  const auto cpu = b->cpu->softmax_xent(n, classes, logits.cpu.f32(), good_labels.cpu.i32(), dlogits.cpu.f32());
  const auto gpu = b->cuda->softmax_xent(n, classes, logits.cuda.f32(), good_labels.cuda.i32(), dlogits.cuda.f32());
  CHECK(gpu.loss_sum == doctest::Approx(cpu.loss_sum).epsilon(1e-5));
  CHECK(gpu.correct == cpu.correct);
}

TEST_CASE("CUDA memory: odd byte counts round-trip, empty allocations are allowed") {
  auto b = backends_or_skip();
  if (!b) return;
  std::vector<unsigned char> bytes(1001);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(i * 7 + 3);
  Buffer src(*b->cuda, bytes.size());
  b->cuda->copy_from_host(src.f32(), bytes.data(), bytes.size());
  Buffer dst(*b->cuda, bytes.size());
  b->cuda->copy(dst.f32(), src.f32(), bytes.size());
  std::vector<unsigned char> back(bytes.size());
  b->cuda->copy_to_host(back.data(), dst.f32(), back.size());
  CHECK(back == bytes);
  void* empty = b->cuda->allocate(0);
  b->cuda->deallocate(empty);
  b->cuda->synchronize();
}

}  // namespace
}  // namespace pstrain::nn::parity
