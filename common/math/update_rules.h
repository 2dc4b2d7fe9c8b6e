// The optimizer update rules, each written once, for every place that applies
// them: the servers' per-chunk Optimizer (common/math/optimizer.cc), the CPU backend
// that allreduce workers and the single-worker trainer use
// (worker/nn/cpu_backend.cc), and the CUDA kernels (worker/nn/cuda/
// optimizer_kernels.cu, which nvcc compiles with this header's element
// functions for the device, without FMA contraction).
//
// A step is split in two:
//  - the coefficients of the step (hyper-parameters as configured in double,
//    this step's learning rate, Adam's bias corrections), computed once on the
//    host and rounded to float in one place: *_coefficients() below;
//  - the element-wise arithmetic in float, the inline functions below.
// So every mode applies bit-identical updates for the same gradients, and a
// test can demand equality rather than a tolerance.
//
// SGD (PyTorch's formulation):
//   g' = g + weight_decay * w
//   v  = momentum * v + g'            (v starts at 0; no v when momentum = 0)
//   d  = nesterov ? g' + momentum * v : v
//   w -= lr * d
// Adam (bias-corrected, L2 weight decay added to the gradient), t = 1, 2, ...:
//   g' = g + weight_decay * w
//   m = b1 m + (1-b1) g';  v = b2 v + (1-b2) g'^2
//   w -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
//   arranged as w -= (lr / c1) * m / (sqrt(v) * (1 / sqrt(c2)) + eps).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#if defined(__CUDACC__)
#define PSTRAIN_HOST_DEVICE __host__ __device__
#else
#include <cmath>
#define PSTRAIN_HOST_DEVICE
#endif

namespace pstrain::update {

struct SgdCoefficients {
  float lr = 0.0f;
  float weight_decay = 0.0f;
  float momentum = 0.0f;  // 0: plain SGD, no velocity
  bool nesterov = false;
};

struct AdamCoefficients {
  float step_size = 0.0f;    // lr / (1 - beta1^t)
  float inv_sqrt_c2 = 0.0f;  // 1 / sqrt(1 - beta2^t)
  float beta1 = 0.0f, beta2 = 0.0f;
  float one_minus_beta1 = 0.0f, one_minus_beta2 = 0.0f;  // 1 - beta, computed in double
  float epsilon = 0.0f;
  float weight_decay = 0.0f;
};

// The coefficients of one step. Arguments are not validated beyond t >= 1
// (ComputeError "adam: step count t is 0, expected >= 1"): the optimizers
// check hyper-parameters once, at construction (common/math/optimizer.h).
SgdCoefficients sgd_coefficients(double lr, double momentum, double weight_decay, bool nesterov);
AdamCoefficients adam_coefficients(double lr, double beta1, double beta2, double epsilon, double weight_decay,
                                   std::int64_t t);

// ---- one element ----

PSTRAIN_HOST_DEVICE inline float sgd_plain(float w, float g, const SgdCoefficients& c) {
  return w - c.lr * (g + c.weight_decay * w);
}

// Updates the velocity v and returns the new weight.
PSTRAIN_HOST_DEVICE inline float sgd_momentum(float w, float g, float& v, const SgdCoefficients& c) {
  const float grad = g + c.weight_decay * w;
  const float vel = c.momentum * v + grad;
  v = vel;
  return w - c.lr * (c.nesterov ? grad + c.momentum * vel : vel);
}

// Updates the moments m and v and returns the new weight.
PSTRAIN_HOST_DEVICE inline float adam(float w, float g, float& m, float& v, const AdamCoefficients& c) {
  const float grad = g + c.weight_decay * w;
  const float m_new = c.beta1 * m + c.one_minus_beta1 * grad;
  const float v_new = c.beta2 * v + c.one_minus_beta2 * grad * grad;
  m = m_new;
  v = v_new;
#if defined(__CUDA_ARCH__)
  const float root = sqrtf(v_new);
#else
  const float root = std::sqrt(v_new);
#endif
  return w - c.step_size * m_new / (root * c.inv_sqrt_c2 + c.epsilon);
}

// ---- a range on the host (one loop per variant, so each vectorizes) ----

// velocity may be null only when c.momentum == 0.
void sgd_update(float* w, const float* g, float* velocity, std::size_t num_elems, const SgdCoefficients& c);
void adam_update(float* w, const float* g, float* m, float* v, std::size_t num_elems, const AdamCoefficients& c);

// ---- one checked pass on the host (the servers' apply path) ----
// A gradient as it arrives: float32 (f32), or bfloat16 (bf16, widened exactly
// as it is read); with mean_of = n > 1 each value is the sync mean of a sum of
// n contributions, computed as the policy always has: times 1/n when n is a
// power of two (exact), else divided by n. Exactly one of f32, bf16 is set.
// partial (sync, the last contribution of a step): the rank-ordered sum of the
// contributions before it, added to each value before the mean, so that the
// sum's last add is the update's pass; the gradient's finite check still
// counts its own values only (the partial sum was checked as it came in),
// and a sum that overflowed shows in the result's check (UpdateCheck).
// The copy and add kernels below ignore it.
struct GradSource {
  const float* f32 = nullptr;
  const std::uint16_t* bf16 = nullptr;
  int mean_of = 1;
  const float* partial = nullptr;
};

// What the checked update found (the servers own what they apply: a NaN or
// Inf in, or out, changes nothing). bad_gradient: gradient values (before
// the mean) that are NaN or +-Inf. bad_result: elements whose new weight or
// new optimizer state (velocity; Adam's moments) is NaN or +-Inf although
// the gradient was finite (a huge gradient, rate or sum overflowed), the
// first of them at first_bad_result; only looked for when bad_gradient is 0.
struct UpdateCheck {
  std::int64_t bad_gradient = 0;
  std::int64_t bad_result = 0;
  std::int64_t first_bad_result = -1;
  bool clean() const { return bad_gradient == 0 && bad_result == 0; }
  // Adds the check of the range that starts `offset` elements later (a
  // chunk's update split into ranges).
  void merge(const UpdateCheck& later, std::int64_t offset) {
    bad_gradient += later.bad_gradient;
    bad_result += later.bad_result;
    if (first_bad_result < 0 && later.first_bad_result >= 0) first_bad_result = later.first_bad_result + offset;
  }
};

// The same updates as above, out of place and fused with the finite checks:
// reads w, the gradient and the state, writes w_out and the new state to
// *_out (none may alias an input), and tests in the same pass what it
// produced (the new weight; Adam: and its second moment), one OR per value,
// no branch: a NaN or Inf in the gradient always shows there too, so only on
// a finding does one more pass tell a bad gradient (counted before the mean)
// from an overflow (UpdateCheck). The caller keeps the inputs unless the
// check is clean(), so a rejected update changes nothing.
// velocity/velocity_out may be null only when c.momentum == 0.
UpdateCheck sgd_update_into(const float* w, float* w_out, GradSource g, const float* velocity, float* velocity_out,
                            std::size_t num_elems, const SgdCoefficients& c);
UpdateCheck adam_update_into(const float* w, float* w_out, GradSource g, const float* m, float* m_out,
                             const float* v, float* v_out, std::size_t num_elems, const AdamCoefficients& c);
// Gradient intake of the sync sum, each one pass that also counts the
// non-finite values of g: out = g (a copy, widened from bfloat16), and out =
// sum + g (out must not alias sum). mean_of is ignored.
std::int64_t copy_checked(GradSource g, float* out, std::size_t num_elems);
std::int64_t add_checked(const float* sum, GradSource g, float* out, std::size_t num_elems);
// Index of the first NaN or +-Inf of g (mean_of ignored), or -1: for the
// message once a count above said there is one.
std::int64_t first_non_finite(GradSource g, std::size_t num_elems);

// ---- in place (the servers' apply path when no pull reply holds the weights) ----
// The largest |value| of a range as float bits (its bit pattern without the
// sign: for non-negative floats the integer order is the float order), so
// one integer max per value is both the bound and the finite check:
// kNonFiniteBits or more means a NaN or Inf was among the values.
inline constexpr std::uint32_t kNonFiniteBits = 0x7f800000u;
std::uint32_t max_abs_bits(const float* values, std::size_t num_elems);
// The same of the values an update takes from g: partial + g (partial when
// set; g widened from bfloat16), before the mean (which only shrinks them).
std::uint32_t gradient_bound_bits(GradSource g, std::size_t num_elems);
// Bounds on |new weight| and |new velocity| after an SGD update of weights
// |w| <= max_w, velocity |v| <= max_v (0 without momentum) and gradient
// values |partial + g| <= max_g, float rounding included; nullopt when some
// value of the update could overflow, or an argument is not finite. The
// bounds only grow from update to update (a caller re-tightens them with
// max_abs_bits when they stop fitting).
struct SgdBounds {
  double weights = 0.0;
  double velocity = 0.0;
};
std::optional<SgdBounds> sgd_bounds_after(const SgdCoefficients& c, double max_w, double max_v, double max_g);
// The update of sgd_update_into, in place: w and velocity are overwritten
// with the same bits sgd_update_into would write to w_out and velocity_out.
// No check: the caller has made sure with sgd_bounds_after() on
// gradient_bound_bits() that nothing can overflow. A gradient value
// (partial + g) above that bound, max_g_bits, or a NaN is taken as 0: the
// gradient may lie in memory its sender can still write (shared memory),
// and a value rewritten after the bound was taken must not break it; a
// sender that keeps its buffer unchanged, as the protocol asks, gets
// exactly its update.
void sgd_update_in_place(float* w, GradSource g, float* velocity, std::size_t num_elems, const SgdCoefficients& c,
                         std::uint32_t max_g_bits);
// Whether this process runs gradient_bound_bits, max_abs_bits and
// sgd_update_in_place in their AVX2 build (an x86-64 build without -mavx2 on
// a CPU with AVX2): the same results, in wider vectors.
bool in_place_wide_vectors();

}  // namespace pstrain::update
