// One GPU's utilization, memory and power through NVML, the library that
// comes with NVIDIA's driver (libnvidia-ml.so.1). It is loaded with dlopen at
// run time: nothing links against it, so pstrain builds and runs on machines
// without it, where open() says why there is no GPU to sample.
//
// Which device: NVML numbers GPUs by PCI bus id over all of the machine's
// GPUs, CUDA over the visible ones (CUDA_VISIBLE_DEVICES). When that variable
// lists indices or UUIDs, CUDA device i is its i-th entry; without it the
// CUDA index is taken as the NVML index (true with CUDA_DEVICE_ORDER=PCI_BUS_ID
// and on machines whose GPUs are all alike, as CUDA's default order puts the
// fastest first).
#pragma once

#include <memory>
#include <optional>
#include <string>

namespace pstrain {

// Each value is empty when NVML could not read it (e.g. power on a board
// that does not report it).
struct GpuSample {
  std::optional<double> util_percent;    // share of NVML's last sample period a kernel ran (whole device)
  std::optional<double> mem_used_bytes;  // device memory in use (whole device, every process)
  std::optional<double> power_w;         // board power draw
};

class NvmlGpu {
 public:
  static constexpr const char* kDefaultLibrary = "libnvidia-ml.so.1";

  // NVML's handle of CUDA device `cuda_index`, or nullptr with `why_not` set
  // ("cannot load libnvidia-ml.so.1: ...", "nvmlInit_v2 failed: ...", ...).
  // `library` is the file dlopen loads (tests pass one that does not exist).
  static std::unique_ptr<NvmlGpu> open(int cuda_index, std::string* why_not, const char* library = kDefaultLibrary);
  ~NvmlGpu();
  NvmlGpu(const NvmlGpu&) = delete;
  NvmlGpu& operator=(const NvmlGpu&) = delete;

  // The current values; `why_not` gets the reason for the first one missing.
  GpuSample sample(std::string* why_not = nullptr) const;
  // "NVML device 0 (CUDA device 0)".
  const std::string& description() const { return description_; }

  // The NVML device (index or UUID) that CUDA device `cuda_index` is, given
  // CUDA_VISIBLE_DEVICES (`visible`, null when unset): "3", "GPU-8f3c...".
  // Exposed for tests.
  static std::string nvml_device_for(int cuda_index, const char* visible);

 private:
  struct Api;
  NvmlGpu(std::unique_ptr<Api> api, std::string description);

  std::unique_ptr<Api> api_;
  std::string description_;
};

}  // namespace pstrain
