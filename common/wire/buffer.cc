#include "common/wire/buffer.h"

#include <memory>

namespace pstrain {

namespace {
Buffer heap_block(std::size_t size, const void* from) {
  auto block = std::make_unique_for_overwrite<std::byte[]>(size);
  if (from != nullptr) {
    std::memcpy(block.get(), from, size);
  } else {
    std::memset(block.get(), 0, size);
  }
  return Buffer::hold(std::move(block), [size](const std::unique_ptr<std::byte[]>& b) {
    return std::span<const std::byte>(b.get(), size);
  });
}
}  // namespace

Buffer Buffer::copy(const void* data, std::size_t size) {
  if (size > kInlineBytes) return heap_block(size, data);
  Buffer b;
  if (size > 0) std::memcpy(b.storage_, data, size);
  b.data_ = b.storage_;
  b.size_ = size;
  return b;
}

Buffer Buffer::zeros(std::size_t size) {
  if (size > kInlineBytes) return heap_block(size, nullptr);
  Buffer b;
  std::memset(b.storage_, 0, kInlineBytes);
  b.data_ = b.storage_;
  b.size_ = size;
  return b;
}

}  // namespace pstrain
