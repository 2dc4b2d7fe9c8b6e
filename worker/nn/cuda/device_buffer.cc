// Growable device scratch memory; see device_buffer.h.
#include "worker/nn/cuda/device_buffer.h"

#include <string>
#include <utility>

#include "worker/nn/cuda/cuda_check.h"

namespace pstrain::nn::cuda {
namespace {

constexpr std::size_t kGranuleBytes = std::size_t{1} << 20;

}  // namespace

DeviceBuffer::~DeviceBuffer() { release(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)), capacity_bytes_(std::exchange(other.capacity_bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release();
    ptr_ = std::exchange(other.ptr_, nullptr);
    capacity_bytes_ = std::exchange(other.capacity_bytes_, 0);
  }
  return *this;
}

void* DeviceBuffer::reserve(std::size_t num_bytes, cudaStream_t stream, std::string_view op) {
  if (num_bytes <= capacity_bytes_) return ptr_;
  const std::size_t rounded = (num_bytes + kGranuleBytes - 1) / kGranuleBytes * kGranuleBytes;
  check_cuda(cudaStreamSynchronize(stream), std::string(op) + ": waiting before growing scratch memory");
  release();
  void* fresh = nullptr;
  check_cuda(cudaMalloc(&fresh, rounded),
             std::string(op) + ": cudaMalloc of " + std::to_string(rounded) + " bytes of scratch memory");
  ptr_ = fresh;
  capacity_bytes_ = rounded;
  return ptr_;
}

void DeviceBuffer::release() noexcept {
  if (ptr_ != nullptr) {
    static_cast<void>(cudaFree(ptr_));
    ptr_ = nullptr;
    capacity_bytes_ = 0;
  }
}

}  // namespace pstrain::nn::cuda
