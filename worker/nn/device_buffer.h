// RAII ownership of backend-allocated ("device") memory, with typed views and
// host transfer helpers. Move-only. The backend must outlive the buffer.
// Not thread-safe (the backend is not).
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <utility>

#include "common/base/errors.h"
#include "worker/nn/backend.h"

namespace pstrain::nn {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Backend& backend, std::size_t num_bytes)
      : backend_(&backend), ptr_(num_bytes > 0 ? backend.allocate(num_bytes) : nullptr), num_bytes_(num_bytes) {}
  ~DeviceBuffer() { reset(); }

  DeviceBuffer(DeviceBuffer&& other) noexcept
      : backend_(std::exchange(other.backend_, nullptr)),
        ptr_(std::exchange(other.ptr_, nullptr)),
        num_bytes_(std::exchange(other.num_bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      reset();
      backend_ = std::exchange(other.backend_, nullptr);
      ptr_ = std::exchange(other.ptr_, nullptr);
      num_bytes_ = std::exchange(other.num_bytes_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void reset() noexcept {
    if (ptr_ != nullptr) backend_->deallocate(ptr_);
    ptr_ = nullptr;
    num_bytes_ = 0;
  }

  std::size_t num_bytes() const { return num_bytes_; }
  bool empty() const { return ptr_ == nullptr; }

  // Typed views; num_elems<T>() counts whole elements of T.
  template <class T>
  T* as() { return static_cast<T*>(ptr_); }
  template <class T>
  const T* as() const { return static_cast<const T*>(ptr_); }
  template <class T>
  std::size_t num_elems() const { return num_bytes_ / sizeof(T); }
  float* f32() { return as<float>(); }
  const float* f32() const { return as<float>(); }

  // Host transfers of `host.size()` elements starting at element `offset`.
  // Throw ComputeError when the range does not fit in the buffer.
  template <class T>
  void upload(std::span<const T> host, std::size_t offset = 0) {
    check_range(offset, host.size(), sizeof(T), "upload");
    backend_->copy_from_host(as<T>() + offset, host.data(), host.size_bytes());
  }
  template <class T>
  void download(std::span<T> host, std::size_t offset = 0) const {
    check_range(offset, host.size(), sizeof(T), "download");
    backend_->copy_to_host(host.data(), as<T>() + offset, host.size_bytes());
  }

 private:
  void check_range(std::size_t offset, std::size_t count, std::size_t elem_bytes, const char* op) const {
    if ((offset + count) * elem_bytes > num_bytes_) {
      throw ComputeError(std::string("device buffer ") + op + ": elements [" + std::to_string(offset) + ", " +
                         std::to_string(offset + count) + ") of " + std::to_string(elem_bytes) +
                         " bytes exceed the buffer's " + std::to_string(num_bytes_) + " bytes");
    }
  }

  Backend* backend_ = nullptr;
  void* ptr_ = nullptr;
  std::size_t num_bytes_ = 0;
};

}  // namespace pstrain::nn
