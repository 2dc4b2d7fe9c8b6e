// The GPU's float32 <-> bfloat16 conversion (worker/nn/cuda/bf16_convert.h)
// against common/base/bfloat16.h, bit for bit: random values, ties (both
// directions), values that round up into the next exponent and into Inf,
// NaNs (quiet and signalling, both signs), +-Inf, +-0, subnormals.
// And the same conversions on the worker's wire path: the CUDA copy stream
// (narrowing before the download, widening after the upload) against the
// host copy thread's. Skipped, with the reason printed, when no CUDA device
// is present.
#include <doctest/doctest.h>

#include <bit>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "common/base/bfloat16.h"
#include "common/base/errors.h"
#include "parity_harness.h"
#include "worker/client/host_copy_engine.h"
#if defined(PSTRAIN_HAVE_CUDA)
#include "worker/nn/cuda/bf16_convert.h"
#include "worker/nn/cuda/copy_stream.h"
#endif

namespace pstrain::nn::parity {
namespace {

std::vector<float> conversion_cases() {
  std::vector<float> v = random_floats(100003, 11);  // not a multiple of any block size
  for (float& x : v) x *= 1e3f;
  const std::vector<std::uint32_t> bits = {
      0x3f808000u,  // a tie, even below: stays
      0x3f818000u,  // a tie, odd below: rounds up
      0x3f80ffffu,  // rounds up
      0x3fffffffu,  // rounds into the next exponent
      0x7f7fffffu,  // float32's largest: rounds to Inf
      0xff7fffffu,
      0x7f800000u, 0xff800000u,  // +-Inf
      0x7fc00000u, 0xffc00000u,  // quiet NaNs
      0x7f800001u, 0xff800001u,  // signalling NaNs: quieted, never Inf
      0x7fffffffu,
      0x00000000u, 0x80000000u,  // +-0
      0x00000001u, 0x007fffffu, 0x807fffffu,  // subnormals
  };
  for (std::uint32_t b : bits) v.push_back(std::bit_cast<float>(b));
  return v;
}

TEST_CASE("bfloat16 conversion on the GPU: bit for bit the host's, both ways") {
  auto b = backends_or_skip();
  if (!b) return;
#if defined(PSTRAIN_HAVE_CUDA)
  const std::vector<float> values = conversion_cases();
  const std::size_t n = values.size();
  Buffer src = Buffer::from(*b->cuda, values);
  Buffer narrow(*b->cuda, n * sizeof(std::uint16_t));
  Buffer wide(*b->cuda, n * sizeof(float));
  auto* narrowed = reinterpret_cast<std::uint16_t*>(narrow.f32());
  cuda::narrow_to_bfloat16(*b->cuda, src.f32(), narrowed, n);
  cuda::widen_from_bfloat16(*b->cuda, narrowed, wide.f32(), n);
  b->cuda->synchronize();
  const std::vector<std::uint16_t> got = narrow.to_host<std::uint16_t>();
  const std::vector<float> widened = wide.to_host<float>();
  std::size_t narrow_mismatches = 0, widen_mismatches = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint16_t want = to_bfloat16(values[i]);
    if (got[i] != want && narrow_mismatches++ < 5) MESSAGE("narrow " << i << ": got " << got[i] << " want " << want);
    if (std::bit_cast<std::uint32_t>(widened[i]) != std::bit_cast<std::uint32_t>(from_bfloat16(want))) ++widen_mismatches;
  }
  CHECK(narrow_mismatches == 0);
  CHECK(widen_mismatches == 0);
#endif
}

TEST_CASE("bfloat16 on the wire path: the CUDA copy stream's narrowing and widening equal the host copy thread's") {
  auto b = backends_or_skip();
  if (!b) return;
#if defined(PSTRAIN_HAVE_CUDA)
  const std::vector<float> values = conversion_cases();
  const std::size_t n = values.size();
  const std::size_t offset = 5, count = n - 9;  // a chunk inside the flat buffer, at an odd offset
  // The host path (the CPU worker's copy thread).
  std::vector<std::uint16_t> host_narrowed(n, 0);
  std::vector<float> host_widened(n, 0.0f);
  {
    HostCopyEngine host;
    host.prepare_bfloat16(n);
    host.wait(host.download_narrowed(host_narrowed.data(), values.data(), offset, count, 0));
    host.wait(host.upload_widened(host_widened.data(), host_narrowed.data(), offset, count, 0));
  }
  // The device path: narrowed on the copy stream before the download, widened after the upload.
  Buffer grads = Buffer::from(*b->cuda, values);
  Buffer weights = Buffer::from(*b->cuda, std::vector<float>(n, 0.0f));
  std::vector<std::uint16_t> device_narrowed(n, 0);
  std::unique_ptr<CopyEngine> engine = cuda::make_cuda_copy_engine(*b->cuda, nullptr);
  engine->register_host(device_narrowed.data(), n * sizeof(std::uint16_t));
  engine->prepare_bfloat16(n);
  engine->wait(engine->download_narrowed(device_narrowed.data(), grads.f32(), offset, count, 0));
  engine->wait(engine->upload_widened(weights.f32(), device_narrowed.data(), offset, count, 0));
  const std::vector<float> device_widened = weights.to_host<float>();
  std::size_t narrow_mismatches = 0, widen_mismatches = 0;
  for (std::size_t i = 0; i < n; ++i) {
    narrow_mismatches += device_narrowed[i] != host_narrowed[i] ? 1 : 0;
    widen_mismatches += std::bit_cast<std::uint32_t>(device_widened[i]) != std::bit_cast<std::uint32_t>(host_widened[i]) ? 1 : 0;
  }
  CHECK(narrow_mismatches == 0);
  CHECK(widen_mismatches == 0);
  CHECK(host_narrowed[offset] == to_bfloat16(values[offset]));
  CHECK(device_narrowed[offset - 1] == 0);  // outside the chunk: untouched
  CHECK(device_widened[n - 1] == 0.0f);
  // A conversion past what prepare_bfloat16 sized is refused, naming the chunk.
  CHECK_THROWS_WITH_AS(engine->download_narrowed(device_narrowed.data(), grads.f32(), n - 2, 4, 9),
                       doctest::Contains("bfloat16 conversion of chunk 9"), ComputeError);
#endif
}

}  // namespace
}  // namespace pstrain::nn::parity
