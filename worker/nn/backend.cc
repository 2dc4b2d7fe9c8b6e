// make_backend: picks the backend named by the run config. Without CUDA
// support compiled in, also defines make_cuda_backend (worker/nn/cuda/
// provides it otherwise).
#include "worker/nn/backend.h"

#include <charconv>

#include "common/base/errors.h"
#include "common/observe/gpu_presence.h"

namespace pstrain::nn {
namespace {

// "cuda" -> 0, "cuda:3" -> 3, anything else -> -1.
int cuda_index(std::string_view device) {
  if (device == "cuda") return 0;
  constexpr std::string_view kPrefix = "cuda:";
  if (device.substr(0, kPrefix.size()) != kPrefix) return -1;
  const std::string_view digits = device.substr(kPrefix.size());
  int index = -1;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
  if (ec != std::errc() || end != digits.data() + digits.size() || digits.empty()) return -1;
  return index;
}

}  // namespace

std::unique_ptr<Backend> make_backend(std::string_view device, int threads, std::string* chosen,
                                      const ComputeOptions& options) {
  std::string message;
  std::unique_ptr<Backend> backend;
  if (device == "cpu") {
    backend = make_cpu_backend(threads);
    message = "device cpu: using " + backend->name();
  } else if (device == "auto") {
    std::string why_not;
    // No driver here: the CPU at once, without the CUDA runtime's start (about a
    // second) and its "driver version is insufficient" (common/observe/gpu_presence.h).
    if (const GpuPresence gpus = probe_gpu_presence(); gpus.driver) {
      backend = make_cuda_backend(0, &why_not, options);
    } else {
      why_not = gpus.detail;
    }
    if (backend) {
      message = "device auto: using " + backend->name();
    } else {
      backend = make_cpu_backend(threads);
      message = "device auto: " + why_not + ", using " + backend->name();
    }
  } else if (const int index = cuda_index(device); index >= 0) {
    std::string why_not;
    backend = make_cuda_backend(index, &why_not, options);
    if (!backend) throw ComputeError("device " + std::string(device) + ": " + why_not);
    message = "device " + std::string(device) + ": using " + backend->name();
  } else {
    throw ConfigError("device '" + std::string(device) + "': unknown, expected auto, cpu, cuda or cuda:N");
  }
  if (chosen != nullptr) *chosen = message;
  return backend;
}

Backend::XentResult Backend::end_graph_step() {
  throw ComputeError(name() + ": end_graph_step without a graph step (this backend runs no CUDA graphs)");
}

#if !defined(PSTRAIN_HAVE_CUDA)
std::unique_ptr<Backend> make_cuda_backend(int /*device_index*/, std::string* why_not, const ComputeOptions& /*options*/) {
  if (why_not != nullptr) *why_not = "pstrain was built without CUDA";
  return nullptr;
}
#endif

}  // namespace pstrain::nn
