#include "worker/nn/shape_checks.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "common/base/errors.h"

namespace pstrain::nn {
namespace {

[[noreturn]] void fail(std::string_view op, const std::string& shape, const std::string& why) {
  throw ComputeError(std::string(op) + " [" + shape + "]: " + why);
}

// Flat indices (e.g. maxpool's argmax) are int32, so tensors must fit.
bool fits_int32(std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d) {
  return a * b * c * d <= std::numeric_limits<std::int32_t>::max();
}

}  // namespace

std::string to_string(const Conv2dShape& s) {
  return "n=" + std::to_string(s.n) + " c_in=" + std::to_string(s.c_in) + " h=" + std::to_string(s.h) +
         " w=" + std::to_string(s.w) + " c_out=" + std::to_string(s.c_out) + " k=" + std::to_string(s.k_h) +
         "x" + std::to_string(s.k_w) + " stride=" + std::to_string(s.stride) + " pad=" + std::to_string(s.pad);
}

std::string to_string(const PoolShape& s) {
  return "n=" + std::to_string(s.n) + " c=" + std::to_string(s.c) + " h=" + std::to_string(s.h) +
         " w=" + std::to_string(s.w) + " k=" + std::to_string(s.k) + " stride=" + std::to_string(s.stride);
}

std::string to_string(const LinearShape& s) {
  return "n=" + std::to_string(s.n) + " in=" + std::to_string(s.in) + " out=" + std::to_string(s.out);
}

void check_shape(const Conv2dShape& s, std::string_view op) {
  if (s.n <= 0 || s.c_in <= 0 || s.h <= 0 || s.w <= 0 || s.c_out <= 0 || s.k_h <= 0 || s.k_w <= 0) {
    fail(op, to_string(s), "every dimension must be positive");
  }
  if (s.stride <= 0 || s.pad < 0) fail(op, to_string(s), "stride must be positive and pad non-negative");
  if (s.k_h > s.h + 2 * s.pad || s.k_w > s.w + 2 * s.pad) {
    fail(op, to_string(s), "kernel " + std::to_string(s.k_h) + "x" + std::to_string(s.k_w) +
                               " larger than padded input " + std::to_string(s.h + 2 * s.pad) + "x" +
                               std::to_string(s.w + 2 * s.pad));
  }
  if (s.pad >= s.k_h || s.pad >= s.k_w) fail(op, to_string(s), "pad must be smaller than the kernel");
  if (!fits_int32(s.n, std::max(s.c_in, s.c_out), s.h + 2 * s.pad, s.w + 2 * s.pad)) {
    fail(op, to_string(s), "tensor too large (more than 2^31-1 elements)");
  }
}

void check_shape(const PoolShape& s, std::string_view op) {
  if (s.n <= 0 || s.c <= 0 || s.h <= 0 || s.w <= 0 || s.k <= 0 || s.stride <= 0) {
    fail(op, to_string(s), "every dimension, the window and the stride must be positive");
  }
  if (s.k > s.h || s.k > s.w) {
    fail(op, to_string(s), "window " + std::to_string(s.k) + " larger than input " + std::to_string(s.h) + "x" +
                               std::to_string(s.w));
  }
  if (!fits_int32(s.n, s.c, s.h, s.w)) fail(op, to_string(s), "tensor too large (more than 2^31-1 elements)");
}

void check_shape(const LinearShape& s, std::string_view op) {
  if (s.n <= 0 || s.in <= 0 || s.out <= 0) fail(op, to_string(s), "every dimension must be positive");
  if (!fits_int32(s.n, std::max(s.in, s.out), 1, 1) || !fits_int32(s.in, s.out, 1, 1)) {
    fail(op, to_string(s), "tensor too large (more than 2^31-1 elements)");
  }
}

}  // namespace pstrain::nn
