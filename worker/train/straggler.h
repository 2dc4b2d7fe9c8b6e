// Straggler injection: one worker made `slowdown` times slower. Before each
// step it sleeps (slowdown - 1) x its own compute time of the previous step,
// measured without the injected delay, so the delay does not compound. The
// first step (warm-up: allocations, JIT kernels) neither is delayed nor sets
// the pace. Simulated compute scales its step time instead (see
// simulated_compute.h). One per worker loop; not thread-safe.
#pragma once

#include <chrono>
#include <thread>

namespace pstrain {

class Straggler {
 public:
  Straggler(bool active, double slowdown) : active_(active && slowdown > 1.0), slowdown_(slowdown) {}

  bool active() const { return active_; }
  // Sleeps the injected delay; returns it in seconds (0 when inactive).
  double delay() {
    if (!active_ || steps_ < 2) return 0.0;
    const double s = (slowdown_ - 1.0) * own_compute_s_;
    std::this_thread::sleep_for(std::chrono::duration<double>(s));
    return s;
  }
  // The step's compute time without the injected delay.
  void record(double own_compute_s) {
    if (++steps_ >= 2) own_compute_s_ = own_compute_s;
  }

 private:
  bool active_;
  double slowdown_;
  double own_compute_s_ = 0.0;
  int steps_ = 0;
};

}  // namespace pstrain
