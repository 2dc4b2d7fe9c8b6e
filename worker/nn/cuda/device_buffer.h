// An owned, growable block of device memory (cudaMalloc) used as scratch
// space by the CUDA backend (im2col columns, weight-gradient partials,
// per-row loss terms). Growing discards the contents. Move-only; not
// thread-safe; must be used with the device that was current when it grew.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string_view>

namespace pstrain::nn::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer();  // cudaFree; errors are ignored (may run during shutdown)
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;

  // Returns a block of at least num_bytes. When it must grow, first waits for
  // `stream` (queued kernels may still use the old block), frees it and
  // allocates the new size rounded up to 1 MiB. Throws ComputeError naming
  // `op` and the size when cudaMalloc fails.
  void* reserve(std::size_t num_bytes, cudaStream_t stream, std::string_view op);

  void* data() const { return ptr_; }
  std::size_t capacity_bytes() const { return capacity_bytes_; }

 private:
  void release() noexcept;

  void* ptr_ = nullptr;
  std::size_t capacity_bytes_ = 0;
};

}  // namespace pstrain::nn::cuda
