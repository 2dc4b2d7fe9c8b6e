// Simulated compute (workload.simulated_step_ms > 0): a training step that
// only takes time, for scaling experiments without the cost of real
// compute. The same schedule as the parameter-server worker's: a third of
// the step for "forward", the rest spread over the model's tensors in
// backward order (last first) in proportion to their sizes, each tensor's
// gradient range reported to `ready` as it "finishes". Gradients of the
// model's real size come from simulated_gradients().
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "worker/nn/model.h"

namespace pstrain {

// Sleeps `step_s` seconds in total; returns stats with a NaN loss.
nn::StepStats simulated_step(const nn::Model& model, double step_s,
                             const std::function<void(std::int64_t, std::int64_t)>& ready);

// Small, finite, fixed gradients: 1e-6 * ((i mod 17) - 8) for element i.
std::vector<float> simulated_gradients(std::int64_t num_elems);

}  // namespace pstrain
