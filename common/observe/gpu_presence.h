// Whether this host can have a usable NVIDIA GPU, and how many a process
// started here would see, without initializing CUDA: the driver's device
// files and CUDA_VISIBLE_DEVICES. Asking the CUDA runtime (cudaGetDeviceCount)
// on a host without a driver costs about a second and an error message per
// process; this answers the common "no GPU here" at once, so that
// `workload.device = "auto"` picks the CPU quietly and the launcher can check
// a job's GPU needs before anything starts (tools/launcher/gpu_check.h).
#pragma once

#include <filesystem>
#include <string>

namespace pstrain {

struct GpuPresence {
  bool driver = false;  // the NVIDIA driver is loaded here (or WSL's GPU device)
  // GPUs a process started here would see: /dev/nvidia<N> files, limited by
  // CUDA_VISIBLE_DEVICES when set; -1 when unknown (WSL: one /dev/dxg for all).
  int visible_devices = -1;
  std::string detail;  // how that was found: "/dev/nvidia0, /dev/nvidia1; CUDA_VISIBLE_DEVICES=0"
};

// The driver is present when `proc_dir`/version (/proc/driver/nvidia/version),
// `dev_dir`/nvidiactl or `dev_dir`/dxg exists. `visible_env` is the value of
// CUDA_VISIBLE_DEVICES (nullptr: unset): its entries up to the first one
// CUDA would stop at (empty or starting with '-') count, at most the devices
// present. Tests pass their own folders.
GpuPresence probe_gpu_presence(const std::filesystem::path& dev_dir, const std::filesystem::path& proc_dir,
                               const char* visible_env);
// This host: /dev, /proc/driver/nvidia and the process's CUDA_VISIBLE_DEVICES.
GpuPresence probe_gpu_presence();

}  // namespace pstrain
