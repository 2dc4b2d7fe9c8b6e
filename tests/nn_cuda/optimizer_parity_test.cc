// CPU-vs-CUDA parity of the optimizer steps over several consecutive steps
// (state carried between them): SGD with/without momentum, Nesterov and
// weight decay (incl. a null velocity at momentum 0), Adam with and without
// weight decay. Both run common/math/update_rules.h's element functions and the
// CUDA file is compiled without FMA contraction, so the bits must be equal.
// Skipped, with the reason printed, when no CUDA device is present.
#include <doctest/doctest.h>

#include <vector>

#include "parity_harness.h"

namespace pstrain::nn::parity {
namespace {

// The same code on both sides, IEEE-rounded division and sqrt, no FMA: exact.
constexpr double kOptimizerTolerance = 0.0;
constexpr std::size_t kNumElems = 50021;
constexpr int kNumSteps = 5;

TEST_CASE("sgd_step over several steps: CPU and CUDA agree") {
  auto b = backends_or_skip();
  if (!b) return;
  struct Case {
    const char* label;
    update::SgdCoefficients params;
    bool with_velocity;
  };
  const Case cases[] = {
      {"momentum", update::sgd_coefficients(0.1, 0.9, 0.0, false), true},
      {"momentum + weight decay", update::sgd_coefficients(0.05, 0.9, 1e-2, false), true},
      {"nesterov + weight decay", update::sgd_coefficients(0.05, 0.8, 1e-3, true), true},
      {"plain, null velocity", update::sgd_coefficients(0.1, 0.0, 1e-2, false), false},
  };
  std::uint32_t seed = 70;
  for (const Case& c : cases) {
    CAPTURE(c.label);
    BufferPair w(*b, random_floats(kNumElems, seed += 10));
    BufferPair velocity(*b, std::vector<float>(kNumElems, 0.0f));
    for (int step = 0; step < kNumSteps; ++step) {
      BufferPair g(*b, random_floats(kNumElems, seed + static_cast<std::uint32_t>(step) + 1));
      b->cpu->sgd_step(w.cpu.f32(), g.cpu.f32(), c.with_velocity ? velocity.cpu.f32() : nullptr, kNumElems,
                       c.params);
      b->cuda->sgd_step(w.cuda.f32(), g.cuda.f32(), c.with_velocity ? velocity.cuda.f32() : nullptr, kNumElems,
                        c.params);
    }
    check_close("sgd w", w.cpu.to_host<float>(), w.cuda.to_host<float>(), kOptimizerTolerance);
    check_close("sgd velocity", velocity.cpu.to_host<float>(), velocity.cuda.to_host<float>(),
                kOptimizerTolerance);
  }
}

TEST_CASE("adam_step over several steps: CPU and CUDA agree") {
  auto b = backends_or_skip();
  if (!b) return;
  const double weight_decays[] = {0.0, 1e-2};
  std::uint32_t seed = 300;
  for (const double weight_decay : weight_decays) {
    CAPTURE(weight_decay);
    BufferPair w(*b, random_floats(kNumElems, seed += 10));
    BufferPair m(*b, std::vector<float>(kNumElems, 0.0f));
    BufferPair v(*b, std::vector<float>(kNumElems, 0.0f));
    for (int step = 1; step <= kNumSteps; ++step) {
      const auto p = update::adam_coefficients(1e-2, 0.9, 0.999, 1e-8, weight_decay, step);
      BufferPair g(*b, random_floats(kNumElems, seed + static_cast<std::uint32_t>(step)));
      b->cpu->adam_step(w.cpu.f32(), g.cpu.f32(), m.cpu.f32(), v.cpu.f32(), kNumElems, p);
      b->cuda->adam_step(w.cuda.f32(), g.cuda.f32(), m.cuda.f32(), v.cuda.f32(), kNumElems, p);
    }
    check_close("adam w", w.cpu.to_host<float>(), w.cuda.to_host<float>(), kOptimizerTolerance);
    check_close("adam m", m.cpu.to_host<float>(), m.cuda.to_host<float>(), kOptimizerTolerance);
    check_close("adam v", v.cpu.to_host<float>(), v.cuda.to_host<float>(), kOptimizerTolerance);
  }
}

}  // namespace
}  // namespace pstrain::nn::parity
