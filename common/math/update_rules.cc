#include "common/math/update_rules.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include "common/base/errors.h"

namespace pstrain::update {

SgdCoefficients sgd_coefficients(double lr, double momentum, double weight_decay, bool nesterov) {
  return SgdCoefficients{static_cast<float>(lr), static_cast<float>(weight_decay), static_cast<float>(momentum),
                         nesterov};
}

AdamCoefficients adam_coefficients(double lr, double beta1, double beta2, double epsilon, double weight_decay,
                                   std::int64_t t) {
  if (t < 1) throw ComputeError("adam: step count t is " + std::to_string(t) + ", expected >= 1");
  const auto steps = static_cast<double>(t);
  const double correction1 = 1.0 - std::pow(beta1, steps);
  const double correction2 = 1.0 - std::pow(beta2, steps);
  AdamCoefficients c;
  c.step_size = static_cast<float>(lr / correction1);
  c.inv_sqrt_c2 = static_cast<float>(1.0 / std::sqrt(correction2));
  c.beta1 = static_cast<float>(beta1);
  c.beta2 = static_cast<float>(beta2);
  c.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  c.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  c.epsilon = static_cast<float>(epsilon);
  c.weight_decay = static_cast<float>(weight_decay);
  return c;
}

void sgd_update(float* w, const float* g, float* velocity, std::size_t num_elems, const SgdCoefficients& c) {
  if (velocity == nullptr && c.momentum != 0.0f && num_elems > 0) {
    throw ComputeError("sgd_step: momentum " + std::to_string(c.momentum) + " needs a velocity buffer, got null");
  }
  if (velocity == nullptr) {
    for (std::size_t i = 0; i < num_elems; ++i) w[i] = sgd_plain(w[i], g[i], c);
  } else if (c.nesterov) {
    SgdCoefficients k = c;
    k.nesterov = true;  // loop-invariant: one loop per variant
    for (std::size_t i = 0; i < num_elems; ++i) w[i] = sgd_momentum(w[i], g[i], velocity[i], k);
  } else {
    SgdCoefficients k = c;
    k.nesterov = false;
    for (std::size_t i = 0; i < num_elems; ++i) w[i] = sgd_momentum(w[i], g[i], velocity[i], k);
  }
}

void adam_update(float* w, const float* g, float* m, float* v, std::size_t num_elems, const AdamCoefficients& c) {
  for (std::size_t i = 0; i < num_elems; ++i) w[i] = adam(w[i], g[i], m[i], v[i], c);
}

namespace {

// The gradient's sources and the sync mean, as types, so that each
// combination is its own loop (each vectorizes; no branch per element).
struct F32 {
  const float* p;
  float operator()(std::size_t i) const { return p[i]; }
};
struct Bf16 {
  const std::uint16_t* p;
  float operator()(std::size_t i) const { return std::bit_cast<float>(static_cast<std::uint32_t>(p[i]) << 16); }
};
struct NoMean {
  float operator()(float x) const { return x; }
};
struct MulMean {  // n a power of two: x * (1/n) is exact
  float inv;
  float operator()(float x) const { return x * inv; }
};
struct DivMean {
  float n;
  float operator()(float x) const { return x / n; }
};

// 1 for NaN and +-Inf (exponent bits all ones), else 0: branch-free, in
// 32-bit lanes like the floats, so the fused loops vectorize; the loops only
// OR it, and count_bad() counts (one more pass) when something was found.
inline std::uint32_t non_finite(float x) {
  return ((std::bit_cast<std::uint32_t>(x) >> 23) & 0xffu) == 0xffu ? 1u : 0u;
}

// At least 1: the gradient may lie in memory its sender can still write
// (shared memory), so this second pass may not see what the first one did.
template <class Source>
std::int64_t count_bad(Source source, std::size_t num_elems) {
  std::int64_t bad = 0;
  for (std::size_t i = 0; i < num_elems; ++i) bad += non_finite(source(i));
  return std::max<std::int64_t>(bad, 1);
}

// The check of an update pass that OR-ed non_finite() over the values it
// wrote (`bad`): a NaN or Inf in the gradient always makes one there (times
// any rate, 0 included: 0 * Inf is NaN; through the mean, the partial sum,
// the velocity, Adam's moments), and so does an overflow, so the pass tests
// its results only, one test per element as before. On a finding only: one
// more pass counts the gradient's own non-finite values (bad_gradient); if it
// has none (an overflow, or a sender that rewrote its shared memory since),
// the written values w_out and `state` (may be null) are scanned for the
// count and the first (bad_result).
template <class Source>
UpdateCheck checked(std::uint32_t bad, Source source, std::size_t num_elems, const float* w_out,
                    const float* state) {
  UpdateCheck r;
  if (bad == 0) return r;
  for (std::size_t i = 0; i < num_elems; ++i) r.bad_gradient += non_finite(source(i));
  if (r.bad_gradient > 0) return r;
  for (std::size_t i = 0; i < num_elems; ++i) {
    const std::uint32_t out = non_finite(w_out[i]) | (state != nullptr ? non_finite(state[i]) : 0u);
    if (out == 0) continue;
    if (r.first_bad_result < 0) r.first_bad_result = static_cast<std::int64_t>(i);
    ++r.bad_result;
  }
  r.bad_result = std::max<std::int64_t>(r.bad_result, 1);
  return r;
}

void check_source(const GradSource& g, std::size_t num_elems, const char* what) {
  if (num_elems > 0 && (g.f32 == nullptr) == (g.bf16 == nullptr)) {
    throw ComputeError(std::string(what) + ": the gradient needs exactly one of float32 and bfloat16 values");
  }
}

// The value an update takes at i from the gradient's own value x: x, or the
// partial sum's value plus x (GradSource::partial).
struct NoPartial {
  float operator()(std::size_t, float x) const { return x; }
};
struct Partial {
  const float* p;
  float operator()(std::size_t i, float x) const { return p[i] + x; }
};

// Calls body(source, mean) with the types that fit g (g.partial ignored);
// every instantiation of body returns R.
template <class R, class Body>
R dispatch(const GradSource& g, Body&& body) {
  auto with_mean = [&](auto source) -> R {
    if (g.mean_of <= 1) return body(source, NoMean{});
    if ((g.mean_of & (g.mean_of - 1)) == 0) return body(source, MulMean{1.0f / static_cast<float>(g.mean_of)});
    return body(source, DivMean{static_cast<float>(g.mean_of)});
  };
  if (g.bf16 != nullptr) return with_mean(Bf16{g.bf16});
  return with_mean(F32{g.f32});
}

// Calls body(source, mean, plus) with the types that fit g, g.partial included.
template <class R = UpdateCheck, class Body>
R dispatch_update(const GradSource& g, Body&& body) {
  return dispatch<R>(g, [&](auto source, auto mean) -> R {
    if (g.partial != nullptr) return body(source, mean, Partial{g.partial});
    return body(source, mean, NoPartial{});
  });
}

// adam_update_into's pass. Tests the new weight and second moment: v
// overflows first (g * g) while the weight stays finite (m / sqrt(inf) is 0);
// a non-finite m shows in the weight. The buffers are restrict (they may not
// alias: adam_update_into's contract), which leaves GCC few enough runtime
// alias checks to vectorize the loop with the test in it.
template <class Source, class Mean, class Plus>
std::uint32_t adam_pass(const float* __restrict w, float* __restrict w_out, Source source, Mean mean, Plus plus,
                        const float* __restrict m, float* __restrict m_out, const float* __restrict v,
                        float* __restrict v_out, std::size_t num_elems, const AdamCoefficients c) {
  std::uint32_t bad = 0;
  for (std::size_t i = 0; i < num_elems; ++i) {
    float mi = m[i];
    float vi = v[i];
    const float next = adam(w[i], mean(plus(i, source(i))), mi, vi, c);
    bad |= non_finite(next) | non_finite(vi);
    w_out[i] = next;
    m_out[i] = mi;
    v_out[i] = vi;
  }
  return bad;
}

}  // namespace

UpdateCheck sgd_update_into(const float* w, float* w_out, GradSource g, const float* velocity, float* velocity_out,
                            std::size_t num_elems, const SgdCoefficients& c) {
  check_source(g, num_elems, "sgd_update_into");
  if ((velocity == nullptr || velocity_out == nullptr) && c.momentum != 0.0f && num_elems > 0) {
    throw ComputeError("sgd_update_into: momentum " + std::to_string(c.momentum) + " needs velocity buffers, got null");
  }
  const bool plain = velocity == nullptr || velocity_out == nullptr || c.momentum == 0.0f;
  return dispatch_update(g, [&](auto source, auto mean, auto plus) -> UpdateCheck {
    // The new weight alone is tested: a non-finite velocity makes it non-finite too.
    std::uint32_t bad = 0;
    if (plain) {
      for (std::size_t i = 0; i < num_elems; ++i) {
        const float next = sgd_plain(w[i], mean(plus(i, source(i))), c);
        bad |= non_finite(next);
        w_out[i] = next;
      }
    } else if (c.nesterov) {
      SgdCoefficients k = c;
      k.nesterov = true;  // loop-invariant: one loop per variant
      for (std::size_t i = 0; i < num_elems; ++i) {
        float vel = velocity[i];
        const float next = sgd_momentum(w[i], mean(plus(i, source(i))), vel, k);
        bad |= non_finite(next);
        w_out[i] = next;
        velocity_out[i] = vel;
      }
    } else {
      SgdCoefficients k = c;
      k.nesterov = false;
      for (std::size_t i = 0; i < num_elems; ++i) {
        float vel = velocity[i];
        const float next = sgd_momentum(w[i], mean(plus(i, source(i))), vel, k);
        bad |= non_finite(next);
        w_out[i] = next;
        velocity_out[i] = vel;
      }
    }
    return checked(bad, source, num_elems, w_out, plain ? nullptr : velocity_out);
  });
}

UpdateCheck adam_update_into(const float* w, float* w_out, GradSource g, const float* m, float* m_out,
                             const float* v, float* v_out, std::size_t num_elems, const AdamCoefficients& c) {
  check_source(g, num_elems, "adam_update_into");
  return dispatch_update(g, [&](auto source, auto mean, auto plus) -> UpdateCheck {
    const std::uint32_t bad = adam_pass(w, w_out, source, mean, plus, m, m_out, v, v_out, num_elems, c);
    return checked(bad, source, num_elems, w_out, v_out);
  });
}

std::int64_t copy_checked(GradSource g, float* out, std::size_t num_elems) {
  check_source(g, num_elems, "copy_checked");
  g.mean_of = 1;
  return dispatch<std::int64_t>(g, [&](auto source, auto) -> std::int64_t {
    std::uint32_t bad = 0;
    for (std::size_t i = 0; i < num_elems; ++i) {
      const float x = source(i);
      bad |= non_finite(x);
      out[i] = x;
    }
    return bad == 0 ? std::int64_t{0} : count_bad(source, num_elems);
  });
}

std::int64_t add_checked(const float* sum, GradSource g, float* out, std::size_t num_elems) {
  check_source(g, num_elems, "add_checked");
  g.mean_of = 1;
  return dispatch<std::int64_t>(g, [&](auto source, auto) -> std::int64_t {
    std::uint32_t bad = 0;
    for (std::size_t i = 0; i < num_elems; ++i) {
      const float x = source(i);
      bad |= non_finite(x);
      out[i] = sum[i] + x;
    }
    return bad == 0 ? std::int64_t{0} : count_bad(source, num_elems);
  });
}

namespace {

// The in-place path's two loops (the gradient's bound, the update) are also
// compiled for AVX2 where the build's baseline is older (x86-64: SSE2) and
// taken when the CPU has it (wide_vectors()): twice the lanes for the same
// instructions. No FMA is enabled, so every float operation rounds as in the
// baseline loops (same bits; tests/server/in_place_update_test.cc), and the
// bound is an integer max, exact either way.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__AVX2__)
#define PSTRAIN_AVX2_CLONES 1
#define PSTRAIN_TARGET_AVX2 __attribute__((target("avx2")))
#define PSTRAIN_INLINE_LOOP [[gnu::always_inline]] inline
bool wide_vectors() {
  static const bool yes = __builtin_cpu_supports("avx2") != 0;
  return yes;
}
#else
#define PSTRAIN_AVX2_CLONES 0
#define PSTRAIN_INLINE_LOOP inline
#endif

}  // namespace

bool in_place_wide_vectors() {
#if PSTRAIN_AVX2_CLONES
  return wide_vectors();
#else
  return false;
#endif
}

namespace {

// |x| as bits, in a signed 32-bit lane (below 2^31): an integer max that
// SSE2 vectorizes (a compare and a select), with no NaN rule in the way as
// a float max has.
inline std::int32_t abs_bits(float x) {
  return static_cast<std::int32_t>(std::bit_cast<std::uint32_t>(x) & 0x7fffffffu);
}

// The largest abs_bits(value(i)) over [0, n), in 16 independent maxima (four
// vectors): one running max would wait on each compare before the next.
template <class Value>
PSTRAIN_INLINE_LOOP std::uint32_t max_bits_loop(Value value, std::size_t n) {
  constexpr std::size_t kLanes = 16;
  std::int32_t lanes[kLanes] = {};
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (std::size_t j = 0; j < kLanes; ++j) lanes[j] = std::max(lanes[j], abs_bits(value(i + j)));
  }
  std::int32_t bits = 0;
  for (; i < n; ++i) bits = std::max(bits, abs_bits(value(i)));
  for (const std::int32_t lane : lanes) bits = std::max(bits, lane);
  return static_cast<std::uint32_t>(bits);
}

#if PSTRAIN_AVX2_CLONES
template <class Value>
PSTRAIN_TARGET_AVX2 std::uint32_t max_bits_avx2(Value value, std::size_t n) {
  return max_bits_loop(value, n);
}
#endif

template <class Value>
std::uint32_t max_bits(Value value, std::size_t n) {
#if PSTRAIN_AVX2_CLONES
  if (wide_vectors()) return max_bits_avx2(value, n);
#endif
  return max_bits_loop(value, n);
}

// x itself while |x| is within the bound (as bits), else 0 (a NaN's bits
// are above every bound): x's bits unchanged, signed zeros included.
inline float within(float x, std::int32_t bound) { return abs_bits(x) <= bound ? x : 0.0f; }

// One in-place SGD loop per variant (plain, momentum, Nesterov), each
// vectorizes; restrict: w, velocity and the gradient never alias.
template <class Source, class Mean, class Plus>
PSTRAIN_INLINE_LOOP void sgd_in_place_loops(float* __restrict w, Source source, Mean mean, Plus plus,
                                            float* __restrict velocity, std::size_t num_elems, const SgdCoefficients c,
                                            std::int32_t bound) {
  if (velocity == nullptr || c.momentum == 0.0f) {
    for (std::size_t i = 0; i < num_elems; ++i) w[i] = sgd_plain(w[i], mean(within(plus(i, source(i)), bound)), c);
    return;
  }
  const auto loop = [&](auto nesterov) {
    SgdCoefficients k = c;
    k.nesterov = decltype(nesterov)::value;  // loop-invariant: one loop per variant
    for (std::size_t i = 0; i < num_elems; ++i) {
      float vel = velocity[i];
      w[i] = sgd_momentum(w[i], mean(within(plus(i, source(i)), bound)), vel, k);
      velocity[i] = vel;
    }
  };
  if (c.nesterov) {
    loop(std::true_type{});
  } else {
    loop(std::false_type{});
  }
}

#if PSTRAIN_AVX2_CLONES
template <class Source, class Mean, class Plus>
PSTRAIN_TARGET_AVX2 void sgd_in_place_avx2(float* __restrict w, Source source, Mean mean, Plus plus,
                                           float* __restrict velocity, std::size_t num_elems, const SgdCoefficients c,
                                           std::int32_t bound) {
  sgd_in_place_loops(w, source, mean, plus, velocity, num_elems, c, bound);
}
#endif

template <class Source, class Mean, class Plus>
void sgd_in_place_pass(float* __restrict w, Source source, Mean mean, Plus plus, float* __restrict velocity,
                       std::size_t num_elems, const SgdCoefficients c, std::int32_t bound) {
#if PSTRAIN_AVX2_CLONES
  if (wide_vectors()) return sgd_in_place_avx2(w, source, mean, plus, velocity, num_elems, c, bound);
#endif
  sgd_in_place_loops(w, source, mean, plus, velocity, num_elems, c, bound);
}

}  // namespace

std::uint32_t max_abs_bits(const float* values, std::size_t num_elems) {
  return max_bits([values](std::size_t i) { return values[i]; }, num_elems);
}

std::uint32_t gradient_bound_bits(GradSource g, std::size_t num_elems) {
  check_source(g, num_elems, "gradient_bound_bits");
  g.mean_of = 1;
  return dispatch_update<std::uint32_t>(g, [&](auto source, auto, auto plus) -> std::uint32_t {
    return max_bits([&](std::size_t i) { return plus(i, source(i)); }, num_elems);
  });
}

std::optional<SgdBounds> sgd_bounds_after(const SgdCoefficients& c, double max_w, double max_v, double max_g) {
  if (!std::isfinite(max_w) || !std::isfinite(max_v) || !std::isfinite(max_g)) return std::nullopt;
  const double lr = std::fabs(static_cast<double>(c.lr)), decay = std::fabs(static_cast<double>(c.weight_decay));
  const double momentum = std::fabs(static_cast<double>(c.momentum));
  const double w = std::fabs(max_w), v = std::fabs(max_v);
  // In real numbers; each float operation rounds by at most 2^-24 relative,
  // and no value is more than 7 roundings deep: (1 + 2^-24)^7 < 1 + 1e-6.
  const double grad = std::fabs(max_g) + decay * w;       // g + weight_decay * w
  const double vel = momentum > 0.0 ? momentum * v + grad : 0.0;  // momentum * v + g'
  const double step = momentum > 0.0 ? grad + momentum * vel : grad;  // >= v and g' + momentum * v
  const double next = w + lr * step;
  constexpr double kRounding = 1.0 + 1e-6;
  const double limit = 0.5 * static_cast<double>(std::numeric_limits<float>::max());
  const double largest = kRounding * std::max({grad, vel, step, next, lr * step, decay * w, momentum * vel});
  if (!(largest < limit)) return std::nullopt;
  return SgdBounds{kRounding * next, kRounding * vel};
}

void sgd_update_in_place(float* w, GradSource g, float* velocity, std::size_t num_elems, const SgdCoefficients& c,
                         std::uint32_t max_g_bits) {
  check_source(g, num_elems, "sgd_update_in_place");
  if (velocity == nullptr && c.momentum != 0.0f && num_elems > 0) {
    throw ComputeError("sgd_update_in_place: momentum " + std::to_string(c.momentum) +
                       " needs a velocity buffer, got null");
  }
  dispatch_update<int>(g, [&](auto source, auto mean, auto plus) -> int {
    sgd_in_place_pass(w, source, mean, plus, velocity, num_elems, c,
                      static_cast<std::int32_t>(std::min(max_g_bits, kNonFiniteBits - 1)));
    return 0;
  });
}

std::int64_t first_non_finite(GradSource g, std::size_t num_elems) {
  check_source(g, num_elems, "first_non_finite");
  g.mean_of = 1;
  return dispatch<std::int64_t>(g, [&](auto source, auto) -> std::int64_t {
    for (std::size_t i = 0; i < num_elems; ++i) {
      if (non_finite(source(i)) != 0) return static_cast<std::int64_t>(i);
    }
    return -1;
  });
}

}  // namespace pstrain::update
