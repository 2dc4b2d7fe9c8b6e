// Helpers for the CPU-vs-CUDA parity tests: both backends or a logged skip,
// backend-owned buffers, seeded random data and the closeness check.
//
// Every parity test starts with
//   auto pair = backends_or_skip();
//   if (!pair) return;   // no CUDA device: skipped, the reason printed
// so on machines without a GPU every case is skipped, with the reason in its
// output, and CTest reports the nn_cuda entry as skipped (tests/support/skip.h).
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "worker/nn/backend.h"
#include "tests/support/skip.h"

namespace pstrain::nn::parity {

struct Backends {
  std::unique_ptr<Backend> cpu;
  std::unique_ptr<Backend> cuda;
};

// Both backends, or nullopt after skipping the current test case ("skipped: <reason>").
inline std::optional<Backends> backends_or_skip() {
  std::string why_not;
  auto cuda = make_cuda_backend(0, &why_not);
  if (!cuda) {
    pstrain::test::skip_case("no CUDA backend: " + why_not);
    return std::nullopt;
  }
  return Backends{make_cpu_backend(1), std::move(cuda)};
}

// Memory owned by a backend (device memory for CUDA), freed on destruction.
class Buffer {
 public:
  Buffer(Backend& backend, std::size_t num_bytes)
      : backend_(&backend), ptr_(backend.allocate(num_bytes)), num_bytes_(num_bytes) {}
  ~Buffer() { backend_->deallocate(ptr_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  template <class T>
  static Buffer from(Backend& backend, const std::vector<T>& host) {
    Buffer buffer(backend, host.size() * sizeof(T));
    backend.copy_from_host(buffer.ptr_, host.data(), buffer.num_bytes_);
    return buffer;
  }
  template <class T>
  std::vector<T> to_host() const {
    std::vector<T> host(num_bytes_ / sizeof(T));
    backend_->copy_to_host(host.data(), ptr_, host.size() * sizeof(T));
    return host;
  }
  float* f32() const { return static_cast<float*>(ptr_); }
  std::int32_t* i32() const { return static_cast<std::int32_t*>(ptr_); }

 private:
  Buffer(Buffer&& other) noexcept
      : backend_(other.backend_), ptr_(std::exchange(other.ptr_, nullptr)), num_bytes_(other.num_bytes_) {}

  Backend* backend_;
  void* ptr_;
  std::size_t num_bytes_;
};

// The same host data uploaded to both backends.
struct BufferPair {
  Buffer cpu, cuda;
  template <class T>
  BufferPair(Backends& b, const std::vector<T>& host)
      : cpu(Buffer::from(*b.cpu, host)), cuda(Buffer::from(*b.cuda, host)) {}
  // The copy living on `backend`.
  const Buffer& on(const Backend& backend) const { return backend.is_cuda() ? cuda : cpu; }
};

inline std::vector<float> random_floats(std::size_t num_elems, std::uint32_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> values(num_elems);
  for (float& v : values) v = dist(rng);
  return values;
}

inline std::size_t count_non_finite(const std::vector<float>& values) {
  return static_cast<std::size_t>(
      std::count_if(values.begin(), values.end(), [](float v) { return !std::isfinite(v); }));
}

// max |ref - got| / max |ref| (denominator at least 1e-30): 0 for identical vectors.
inline double normalized_error(const std::vector<float>& ref, const std::vector<float>& got) {
  double max_diff = 0.0, max_ref = 1e-30;
  for (std::size_t i = 0; i < ref.size() && i < got.size(); ++i) {
    max_diff = std::max(max_diff, std::abs(static_cast<double>(ref[i]) - got[i]));
    max_ref = std::max(max_ref, std::abs(static_cast<double>(ref[i])));
  }
  return max_diff / max_ref;
}

// Checks sizes, then that neither side has NaN/Inf, then the normalized error <= tolerance.
inline void check_close(std::string_view what, const std::vector<float>& cpu, const std::vector<float>& cuda,
                        double tolerance) {
  INFO("tensor: " << std::string(what));
  REQUIRE(cpu.size() == cuda.size());
  CHECK(count_non_finite(cpu) == 0);
  CHECK(count_non_finite(cuda) == 0);
  const double error = normalized_error(cpu, cuda);
  INFO("normalized error " << error << " vs tolerance " << tolerance);
  CHECK(error <= tolerance);
}

}  // namespace pstrain::nn::parity
