// Simulated compute (workload.simulated_step_ms > 0): a training step that
// only takes time, for measuring the system's overhead per step without the
// cost of real compute. The schedule follows the model's layers as a real
// step does (Model::train_step): a third of the step is "forward", spread
// over the layers with parameters in forward order in proportion to their
// sizes, each layer's part preceded by `gate` with its parameter range (the
// PS worker waits there for that layer's pulled weights); the rest is
// "backward", spread over the same layers last first in the same
// proportions, each layer's gradient range reported to `ready` as its part
// ends. Gradients of the model's real size come from simulated_gradients().
//
// The step takes its stated time, not that plus a wake-up per part: every
// part ends at an absolute deadline, the step's start plus the parts so far
// (wait_until_precisely), so neither a sleep's overshoot nor the time a
// `ready` callback takes adds up over the parts (a GPU's queued kernels run
// while the host calls back, too). Only a `gate` that waits moves the
// deadlines on: a layer's compute starts once its weights are there.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "worker/nn/model.h"

namespace pstrain {

// Returns at `deadline`, never before and, on an idle core, within a few
// microseconds after: sleeps (clock_nanosleep to the absolute time, with the
// calling thread's timer slack at 1 ns) until shortly before, then spins.
// The spin's length follows the wake-ups this thread has seen (their delay
// beyond the time asked, times 1.5, within [20 us, 150 us]).
void wait_until_precisely(std::chrono::steady_clock::time_point deadline);

// Runs the simulated step of `step_s` seconds (see above); returns stats with
// a NaN loss. `gate` may be empty.
nn::StepStats simulated_step(const nn::Model& model, double step_s, const nn::GradsReadyFn& ready,
                             const nn::ForwardGateFn& gate = {});

// Small, finite, fixed gradients: 1e-6 * ((i mod 17) - 8) for element i.
std::vector<float> simulated_gradients(std::int64_t num_elems);

}  // namespace pstrain
