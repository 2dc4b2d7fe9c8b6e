#include "common/observe/gpu_presence.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <system_error>

namespace pstrain {
namespace {

bool present(const std::filesystem::path& p) {
  std::error_code ec;
  return std::filesystem::exists(p, ec);
}

// /dev/nvidia0, /dev/nvidia1, ...: one per GPU the driver exposes.
int device_files(const std::filesystem::path& dev_dir, std::string& names) {
  int count = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dev_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() <= 6 || name.compare(0, 6, "nvidia") != 0) continue;
    if (!std::all_of(name.begin() + 6, name.end(), [](unsigned char c) { return std::isdigit(c) != 0; })) continue;
    ++count;
  }
  if (count > 0) names = std::to_string(count) + " " + (dev_dir / "nvidia<N>").string() + " file(s)";
  return count;
}

// CUDA takes the entries in order and stops at the first invalid one.
int visible_entries(const std::string& value) {
  int count = 0;
  std::size_t begin = 0;
  while (begin <= value.size()) {
    const std::size_t end = std::min(value.find(',', begin), value.size());
    const std::string entry = value.substr(begin, end - begin);
    if (entry.empty() || entry[0] == '-') break;
    ++count;
    begin = end + 1;
  }
  return count;
}

}  // namespace

GpuPresence probe_gpu_presence(const std::filesystem::path& dev_dir, const std::filesystem::path& proc_dir,
                               const char* visible_env) {
  GpuPresence out;
  const bool wsl = present(dev_dir / "dxg");
  out.driver = present(proc_dir / "version") || present(dev_dir / "nvidiactl") || wsl;
  if (!out.driver) {
    out.detail = "no NVIDIA driver: none of " + (proc_dir / "version").string() + ", " +
                 (dev_dir / "nvidiactl").string() + ", " + (dev_dir / "dxg").string();
    out.visible_devices = 0;
    return out;
  }
  std::string files;
  const int present = device_files(dev_dir, files);
  out.visible_devices = present > 0 ? present : (wsl ? -1 : 0);
  out.detail = present > 0 ? files : (wsl ? (dev_dir / "dxg").string() + " (WSL: count unknown)"
                                          : "the driver, but no " + (dev_dir / "nvidia<N>").string() + " file");
  if (visible_env != nullptr) {
    const int listed = visible_entries(visible_env);
    out.visible_devices = out.visible_devices < 0 ? listed : std::min(out.visible_devices, listed);
    out.detail += std::string("; CUDA_VISIBLE_DEVICES=") + visible_env;
  }
  return out;
}

GpuPresence probe_gpu_presence() {
  return probe_gpu_presence("/dev", "/proc/driver/nvidia", std::getenv("CUDA_VISIBLE_DEVICES"));
}

}  // namespace pstrain
