// A stand-in for NVML (libnvidia-ml.so.1) with fixed readings, loaded by the
// resource sampler's tests through NvmlGpu::open's `library` argument, so the
// dlopen/dlsym path and the C ABI are exercised on machines without a GPU.
// Device 0: 37 % busy, 1234567890 bytes used, 71.5 W. Device 1: the same but
// power "not supported". Other indices: "invalid argument". With
// FAKE_NVML_FAIL_INIT set, nvmlInit_v2 fails as with no driver loaded.
// (Its own folder's glob takes only *.cc: this file builds as a module.)
#include <cstdlib>

namespace {
struct Device {
  int index;
};
Device g_devices[2] = {{0}, {1}};
constexpr int kSuccess = 0, kInvalidArgument = 2, kNotSupported = 3, kDriverNotLoaded = 9;
}  // namespace

extern "C" {

struct FakeUtilization {
  unsigned int gpu, memory;
};
struct FakeMemory {
  unsigned long long total, free, used;
};

int nvmlInit_v2() { return std::getenv("FAKE_NVML_FAIL_INIT") != nullptr ? kDriverNotLoaded : kSuccess; }
int nvmlShutdown() { return kSuccess; }
const char* nvmlErrorString(int result) {
  switch (result) {
    case kInvalidArgument: return "Invalid Argument";
    case kNotSupported: return "Not Supported";
    case kDriverNotLoaded: return "Driver Not Loaded";
    default: return "Unknown Error";
  }
}
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, Device** device) {
  if (index > 1) return kInvalidArgument;
  *device = &g_devices[index];
  return kSuccess;
}
int nvmlDeviceGetHandleByUUID(const char*, Device**) { return kInvalidArgument; }
int nvmlDeviceGetUtilizationRates(Device*, FakeUtilization* u) {
  u->gpu = 37;
  u->memory = 5;
  return kSuccess;
}
int nvmlDeviceGetMemoryInfo(Device*, FakeMemory* m) {
  m->total = 80000000000ULL;
  m->used = 1234567890ULL;
  m->free = m->total - m->used;
  return kSuccess;
}
int nvmlDeviceGetPowerUsage(Device* device, unsigned int* milliwatts) {
  if (device->index == 1) return kNotSupported;
  *milliwatts = 71500;
  return kSuccess;
}

}  // extern "C"
