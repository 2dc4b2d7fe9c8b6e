// make_backend: device names, the one-line choice message, and errors.
#include <doctest/doctest.h>

#include "common/observe/gpu_presence.h"

#include "common/base/errors.h"
#include "worker/nn/backend.h"

namespace pstrain::nn {
namespace {

TEST_CASE("cpu is always available and names its threads") {
  std::string chosen;
  auto backend = make_backend("cpu", 2, &chosen);
  REQUIRE(backend != nullptr);
  CHECK_FALSE(backend->is_cuda());
  CHECK(backend->name() == "cpu (oneDNN, 2 threads)");
  CHECK(chosen == "device cpu: using cpu (oneDNN, 2 threads)");
  CHECK(make_backend("cpu", 1)->name() == "cpu (oneDNN, 1 thread)");
  const ComputePath path = backend->compute_path();  // the CPU's convolutions: oneDNN, in fp32 whatever was asked
  CHECK(path.conv == "onednn");
  CHECK(path.detail.starts_with("oneDNN "));
  CHECK(path.precision == "fp32");
  ComputeOptions tf32;
  tf32.tf32 = true;
  CHECK(make_backend("cpu", 1, nullptr, tf32)->compute_path().precision == "fp32");
}

TEST_CASE("auto falls back to the CPU and says why; cuda without a device is an error") {
  std::string why_not;
  auto cuda = make_cuda_backend(0, &why_not);
  std::string chosen;
  auto backend = make_backend("auto", 1, &chosen);
  REQUIRE(backend != nullptr);
  if (cuda) {
    CHECK(backend->is_cuda());
    CHECK(chosen == "device auto: using " + backend->name());
  } else {
    CHECK_FALSE(why_not.empty());
    // Without NVIDIA's driver, auto does not start CUDA: the reason is the probe's (common/observe/gpu_presence.h).
    const GpuPresence gpus = probe_gpu_presence();
    CHECK(chosen == "device auto: " + (gpus.driver ? why_not : gpus.detail) + ", using cpu (oneDNN, 1 thread)");
    CHECK_THROWS_WITH_AS(make_backend("cuda", 1), ("device cuda: " + why_not).c_str(), ComputeError);
    CHECK_THROWS_WITH_AS(make_backend("cuda:1", 1), doctest::Contains("device cuda:1: "), ComputeError);
  }
#if !defined(PSTRAIN_HAVE_CUDA)
  CHECK(why_not == "pstrain was built without CUDA");
#endif
}

TEST_CASE("unknown device names are config errors") {
  CHECK_THROWS_WITH_AS(make_backend("tpu", 1), "device 'tpu': unknown, expected auto, cpu, cuda or cuda:N", ConfigError);
  CHECK_THROWS_WITH_AS(make_backend("cuda:x", 1), "device 'cuda:x': unknown, expected auto, cpu, cuda or cuda:N",
                       ConfigError);
  CHECK_THROWS_WITH_AS(make_backend("cuda:", 1), "device 'cuda:': unknown, expected auto, cpu, cuda or cuda:N",
                       ConfigError);
}

}  // namespace
}  // namespace pstrain::nn
