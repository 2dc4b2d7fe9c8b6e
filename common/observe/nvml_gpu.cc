#include "common/observe/nvml_gpu.h"

#include <dlfcn.h>

#include <cctype>
#include <cstdlib>
#include <vector>

namespace pstrain {
namespace {

// The few parts of NVML's C ABI used here (NVML's documented API): results
// are an int enum with 0 = success; a device is an opaque pointer.
using NvmlReturn = int;
constexpr NvmlReturn kNvmlSuccess = 0;
struct NvmlDeviceOpaque;
using NvmlDevice = NvmlDeviceOpaque*;
struct NvmlUtilization {  // nvmlUtilization_t
  unsigned int gpu;       // percent of time a kernel ran over the last sample period
  unsigned int memory;    // percent of time device memory was read or written
};
struct NvmlMemory {  // nvmlMemory_t (version 1)
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

using InitFn = NvmlReturn (*)();
using ShutdownFn = NvmlReturn (*)();
using ErrorStringFn = const char* (*)(NvmlReturn);
using HandleByIndexFn = NvmlReturn (*)(unsigned int, NvmlDevice*);
using HandleByUuidFn = NvmlReturn (*)(const char*, NvmlDevice*);
using UtilizationFn = NvmlReturn (*)(NvmlDevice, NvmlUtilization*);
using MemoryFn = NvmlReturn (*)(NvmlDevice, NvmlMemory*);
using PowerFn = NvmlReturn (*)(NvmlDevice, unsigned int*);  // milliwatts

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (const char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

std::string trim(const std::string& s) {
  std::size_t begin = 0, end = s.size();
  while (begin < end && std::isspace(static_cast<unsigned char>(s[begin]))) ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(s[end - 1]))) --end;
  return s.substr(begin, end - begin);
}

}  // namespace

struct NvmlGpu::Api {
  void* library = nullptr;
  bool initialized = false;
  ShutdownFn shutdown = nullptr;
  ErrorStringFn error_string = nullptr;
  UtilizationFn utilization = nullptr;
  MemoryFn memory = nullptr;
  PowerFn power = nullptr;
  NvmlDevice device = nullptr;

  std::string error(const char* call, NvmlReturn r) const {
    const char* text = error_string != nullptr ? error_string(r) : nullptr;
    return std::string(call) + " failed: " + (text != nullptr ? text : "error " + std::to_string(r));
  }

  ~Api() {
    if (initialized && shutdown != nullptr) shutdown();
    if (library != nullptr) dlclose(library);
  }
};

std::string NvmlGpu::nvml_device_for(int cuda_index, const char* visible) {
  if (cuda_index < 0) return "";
  if (visible == nullptr) return std::to_string(cuda_index);
  // A comma-separated list; CUDA stops at the first entry it cannot parse,
  // so an empty entry ends the list here too.
  std::vector<std::string> entries;
  std::string list = visible;
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t comma = std::min(list.find(',', start), list.size());
    const std::string entry = trim(list.substr(start, comma - start));
    if (entry.empty() || entry[0] == '-') break;
    entries.push_back(entry);
    start = comma + 1;
  }
  const auto i = static_cast<std::size_t>(cuda_index);
  return i < entries.size() ? entries[i] : "";
}

NvmlGpu::NvmlGpu(std::unique_ptr<Api> api, std::string description)
    : api_(std::move(api)), description_(std::move(description)) {}

NvmlGpu::~NvmlGpu() = default;

std::unique_ptr<NvmlGpu> NvmlGpu::open(int cuda_index, std::string* why_not, const char* library) {
  auto fail = [&](const std::string& reason) -> std::unique_ptr<NvmlGpu> {
    if (why_not != nullptr) *why_not = reason;
    return nullptr;
  };
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string device = nvml_device_for(cuda_index, visible);
  if (device.empty()) {
    return fail("CUDA device " + std::to_string(cuda_index) + " is not among CUDA_VISIBLE_DEVICES='" +
                (visible != nullptr ? visible : "") + "'");
  }

  auto api = std::make_unique<Api>();
  api->library = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (api->library == nullptr) {
    const char* err = dlerror();
    return fail("cannot load " + std::string(library) + ": " + (err != nullptr ? err : "unknown error"));
  }
  auto symbol = [&](const char* name) { return dlsym(api->library, name); };
  const auto init = reinterpret_cast<InitFn>(symbol("nvmlInit_v2"));
  api->shutdown = reinterpret_cast<ShutdownFn>(symbol("nvmlShutdown"));
  api->error_string = reinterpret_cast<ErrorStringFn>(symbol("nvmlErrorString"));
  const auto by_index = reinterpret_cast<HandleByIndexFn>(symbol("nvmlDeviceGetHandleByIndex_v2"));
  const auto by_uuid = reinterpret_cast<HandleByUuidFn>(symbol("nvmlDeviceGetHandleByUUID"));
  api->utilization = reinterpret_cast<UtilizationFn>(symbol("nvmlDeviceGetUtilizationRates"));
  api->memory = reinterpret_cast<MemoryFn>(symbol("nvmlDeviceGetMemoryInfo"));
  api->power = reinterpret_cast<PowerFn>(symbol("nvmlDeviceGetPowerUsage"));
  if (init == nullptr || api->shutdown == nullptr || by_index == nullptr || api->utilization == nullptr ||
      api->memory == nullptr || api->power == nullptr) {
    return fail(std::string(library) + " lacks the NVML functions needed (nvmlInit_v2, ...)");
  }
  if (const NvmlReturn r = init(); r != kNvmlSuccess) return fail(api->error("nvmlInit_v2", r));
  api->initialized = true;

  NvmlReturn r = kNvmlSuccess;
  if (all_digits(device)) {
    r = by_index(static_cast<unsigned int>(std::stoul(device)), &api->device);
    if (r != kNvmlSuccess) return fail(api->error(("nvmlDeviceGetHandleByIndex_v2(" + device + ")").c_str(), r));
  } else {
    if (by_uuid == nullptr) return fail(std::string(library) + " lacks nvmlDeviceGetHandleByUUID");
    r = by_uuid(device.c_str(), &api->device);
    if (r != kNvmlSuccess) return fail(api->error(("nvmlDeviceGetHandleByUUID(" + device + ")").c_str(), r));
  }
  const std::string description = "NVML device " + device + " (CUDA device " + std::to_string(cuda_index) + ")";
  return std::unique_ptr<NvmlGpu>(new NvmlGpu(std::move(api), description));
}

GpuSample NvmlGpu::sample(std::string* why_not) const {
  GpuSample s;
  auto failed = [&](const char* call, NvmlReturn r) {
    if (why_not != nullptr && why_not->empty()) *why_not = api_->error(call, r);
  };
  NvmlUtilization util{};
  if (const NvmlReturn r = api_->utilization(api_->device, &util); r == kNvmlSuccess) {
    s.util_percent = static_cast<double>(util.gpu);
  } else {
    failed("nvmlDeviceGetUtilizationRates", r);
  }
  NvmlMemory mem{};
  if (const NvmlReturn r = api_->memory(api_->device, &mem); r == kNvmlSuccess) {
    s.mem_used_bytes = static_cast<double>(mem.used);
  } else {
    failed("nvmlDeviceGetMemoryInfo", r);
  }
  unsigned int milliwatts = 0;
  if (const NvmlReturn r = api_->power(api_->device, &milliwatts); r == kNvmlSuccess) {
    s.power_w = static_cast<double>(milliwatts) / 1000.0;
  } else {
    failed("nvmlDeviceGetPowerUsage", r);
  }
  return s;
}

}  // namespace pstrain
