#include "worker/train/simulated_compute.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <thread>

namespace pstrain {

nn::StepStats simulated_step(const nn::Model& model, double step_s,
                             const std::function<void(std::int64_t, std::int64_t)>& ready) {
  const auto& tensors = model.layout().tensors();
  const double total = static_cast<double>(std::max<std::int64_t>(model.num_params(), 1));
  std::this_thread::sleep_for(std::chrono::duration<double>(step_s / 3.0));
  for (auto it = tensors.rbegin(); it != tensors.rend(); ++it) {
    const double share = static_cast<double>(it->num_elems) / total;
    std::this_thread::sleep_for(std::chrono::duration<double>(2.0 * step_s / 3.0 * share));
    ready(it->offset, it->num_elems);
  }
  return nn::StepStats{std::numeric_limits<double>::quiet_NaN(), 0, 0};
}

std::vector<float> simulated_gradients(std::int64_t num_elems) {
  std::vector<float> grads(static_cast<std::size_t>(std::max<std::int64_t>(num_elems, 0)));
  for (std::size_t i = 0; i < grads.size(); ++i) grads[i] = 1e-6f * static_cast<float>(static_cast<int>(i % 17) - 8);
  return grads;
}

}  // namespace pstrain
