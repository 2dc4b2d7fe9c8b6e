#include "worker/data/portable_random.h"

#include <cmath>
#include <numbers>

namespace pstrain::data {

namespace {

std::uint64_t splitmix64_finalize(std::uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

std::uint64_t mix_seed(std::uint64_t a, std::uint64_t b) {
  constexpr std::uint64_t kGolden = 0x9e3779b97f4a7c15ULL;
  return splitmix64_finalize(splitmix64_finalize(a + kGolden) ^ (b + 2 * kGolden));
}

std::uint64_t uniform_below(std::mt19937_64& engine, std::uint64_t bound) {
  const std::uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
  for (;;) {
    const std::uint64_t x = engine();
    if (x >= threshold) return x % bound;
  }
}

double uniform01(std::mt19937_64& engine) {
  return static_cast<double>(engine() >> 11) * 0x1.0p-53;
}

double standard_normal(std::mt19937_64& engine) {
  const double u1 = 1.0 - uniform01(engine);  // (0, 1]: log is finite
  const double u2 = uniform01(engine);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

}  // namespace pstrain::data
