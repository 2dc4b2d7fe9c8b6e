// Random numbers that are the same on every platform and standard library.
//
// std::mt19937_64 is fully specified by the C++ standard, but the
// distributions in <random> are not (libstdc++ and libc++ give different
// values), so data generation and shuffling draw from the engine through
// these functions instead. Given the same engine state the integer functions
// return the same values everywhere; the floating-point ones too, up to the
// last bit of std::log / std::cos in the platform's math library.
#pragma once

#include <cstdint>
#include <random>

namespace pstrain::data {

// Mixes two 64-bit values into a seed (the splitmix64 finalizer applied to a
// combination of both): nearby inputs give unrelated outputs.
std::uint64_t mix_seed(std::uint64_t a, std::uint64_t b);

// Uniform integer in [0, bound), bound >= 1, without modulo bias (rejects the
// engine outputs below 2^64 mod bound).
std::uint64_t uniform_below(std::mt19937_64& engine, std::uint64_t bound);

// Uniform double in [0, 1) from the top 53 bits of one engine output.
double uniform01(std::mt19937_64& engine);

// Standard normal N(0, 1) by the Box-Muller transform (two uniforms per value).
double standard_normal(std::mt19937_64& engine);

}  // namespace pstrain::data
