// Shared by the libFuzzer targets in fuzz/: a cursor over the fuzzer's bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace pstrain::fuzz {

class Input {
 public:
  Input(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  std::size_t left() const { return size_ - pos_; }
  std::uint8_t byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  // The next `n` bytes (fewer at the end).
  std::span<const std::byte> take(std::size_t n) {
    if (n > left()) n = left();
    const auto* p = reinterpret_cast<const std::byte*>(data_ + pos_);
    pos_ += n;
    return {p, n};
  }
  std::span<const std::byte> rest() { return take(left()); }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

}  // namespace pstrain::fuzz
