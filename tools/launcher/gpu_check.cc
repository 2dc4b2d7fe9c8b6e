#include "tools/launcher/gpu_check.h"

namespace pstrain::launcher {
namespace {

bool names_cuda(const std::string& device) { return device == "cuda" || device.rfind("cuda:", 0) == 0; }

}  // namespace

GpuCheck check_gpus(const RunConfig& config, int local_workers, const GpuPresence& gpus, bool nccl_built) {
  GpuCheck out;
  const std::string& device = config.workload.device;
  if (local_workers <= 0 || device == "cpu") return out;
  if (!gpus.driver) {
    if (names_cuda(device)) {
      out.key = "workload.device";
      out.problem = "\"" + device + "\" but this machine has no usable GPU (" + gpus.detail +
                    "); use \"auto\" (a GPU where there is one, else the CPU) or \"cpu\"";
    } else if (config.mode == Mode::kAllreduce && config.collective.backend == "nccl") {
      out.key = "collective.backend";
      out.problem = "\"nccl\" reduces on GPUs, but this machine has no usable GPU (" + gpus.detail +
                    "); use \"gloo\" or \"auto\" (NCCL where the workers have GPUs, else Gloo)";
    } else if (device == "auto") {
      out.note = "workload.device = \"auto\": this machine has no NVIDIA driver, so its " +
                 std::to_string(local_workers) + " worker(s) train on the CPU (" + gpus.detail + ")";
    }
    return out;
  }
  // A GPU per worker: NCCL (its ranks may not share a device).
  const std::string& backend = config.collective.backend;
  const bool nccl = config.mode == Mode::kAllreduce &&
                    (backend == "nccl" || (backend == "auto" && nccl_built && gpus.visible_devices != 0));
  if (!nccl || gpus.visible_devices < 0 || local_workers <= gpus.visible_devices) return out;
  out.key = "cluster.workers";
  out.problem = std::to_string(local_workers) + " allreduce workers on this machine over NCCL, but " +
                std::to_string(gpus.visible_devices) + " GPU(s) visible (" + gpus.detail +
                "): NCCL needs a GPU per worker; use cluster.workers <= " + std::to_string(gpus.visible_devices) +
                ", collective.backend = \"gloo\", or workers on more hosts (cluster.worker_hosts)";
  return out;
}

}  // namespace pstrain::launcher
