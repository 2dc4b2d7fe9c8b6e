// Helpers shared by the nn tests: random host data and a finite-difference
// gradient checker for layers on the CPU backend (whose "device" memory is
// host memory, so tests read and write it directly).
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "worker/nn/backend.h"
#include "worker/nn/device_buffer.h"

namespace pstrain::nn::testing {

inline std::vector<float> random_values(std::size_t n, std::uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = lo + (hi - lo) * static_cast<float>(rng() >> 40) * (1.0f / 16777216.0f);
  return v;
}

// Values with |x| >= margin (away from ReLU's kink).
inline std::vector<float> values_away_from_zero(std::size_t n, std::uint64_t seed, float margin) {
  auto v = random_values(n, seed);
  for (auto& x : v) x = x >= 0.0f ? x + margin : x - margin;
  return v;
}

inline DeviceBuffer device_copy(Backend& backend, const std::vector<float>& host) {
  DeviceBuffer buf(backend, host.size() * sizeof(float));
  buf.upload<float>(host);
  return buf;
}

inline double max_abs(const float* a, std::size_t n) {
  double m = 0.0;
  for (std::size_t i = 0; i < n; ++i) m = std::max(m, std::abs(static_cast<double>(a[i])));
  return m;
}

// Checks |got - want| <= tol * max(max|want|, 1e-3) elementwise.
inline void check_close(const std::string& what, const float* got, const float* want, std::size_t n, double tol) {
  const double scale = std::max(max_abs(want, n), 1e-3);
  std::size_t bad = 0;
  double worst = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const double err = std::abs(static_cast<double>(got[i]) - want[i]);
    worst = std::max(worst, err / scale);
    if (err > tol * scale) ++bad;
  }
  INFO(what << ": worst relative error " << worst << " (tolerance " << tol << "), " << bad << " of " << n
            << " elements off");
  CHECK(bad == 0);
}

// Central-difference check of d(loss)/d(values[i]) for every i against
// `analytic`, where loss() is evaluated in double from float outputs.
// Tolerance: |num - ana| <= atol + rtol * max(|num|, |ana|).
inline void check_gradient(const std::string& what, float* values, std::size_t n, const float* analytic,
                           const std::function<double()>& loss, float eps = 1e-2f, double atol = 5e-4,
                           double rtol = 5e-3) {
  std::size_t bad = 0;
  std::string first_bad;
  for (std::size_t i = 0; i < n; ++i) {
    const float saved = values[i];
    values[i] = saved + eps;
    const double up = loss();
    values[i] = saved - eps;
    const double down = loss();
    values[i] = saved;
    const double numeric = (up - down) / (2.0 * static_cast<double>(eps));
    const double err = std::abs(numeric - analytic[i]);
    if (err > atol + rtol * std::max(std::abs(numeric), std::abs(static_cast<double>(analytic[i])))) {
      if (bad++ == 0) {
        first_bad = "element " + std::to_string(i) + ": numeric " + std::to_string(numeric) + " analytic " +
                    std::to_string(analytic[i]);
      }
    }
  }
  INFO(what << ": " << bad << " of " << n << " gradient elements off; first " << first_bad);
  CHECK(bad == 0);
}

}  // namespace pstrain::nn::testing
