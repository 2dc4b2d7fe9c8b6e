// Buffer: the bytes of one frame (a message's header or payload) and what
// keeps them alive, with no transport's types in sight. Every transport hands
// received frames up as Buffers (Message::payload is one) and takes frames to
// send as Buffers; what owns the bytes depends on where they came from:
//   - nothing: borrow(), the caller keeps the bytes alive (a zero-copy send
//     whose caller waits for the reply);
//   - the Buffer itself: copy() of up to kInlineBytes (a header), or a heap
//     block it owns for more;
//   - any movable owner held inside the Buffer (hold()): a received ZeroMQ
//     message (common/transport/zmq/zmq_socket.h), a shared-memory slot or
//     arena block held open, a std::shared_ptr keep-alive of a tensor.
// An owner of up to kInlineBytes lives inside the Buffer: holding one costs
// no heap allocation. Bytes that lie inside the owner itself (a short ZeroMQ
// message, inline bytes) follow it when the Buffer moves.
// Move-only; data() is stable while the Buffer is not moved (and, for bytes
// outside the Buffer, across moves too).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace pstrain {

class Buffer {
 public:
  static constexpr std::size_t kInlineBytes = 80;

  Buffer() = default;
  Buffer(Buffer&& other) noexcept { take(other); }
  Buffer& operator=(Buffer&& other) noexcept {
    if (this != &other) {
      reset();
      take(other);
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { reset(); }

  // Bytes the caller keeps alive and unchanged while the Buffer lives.
  static Buffer borrow(const void* data, std::size_t size) {
    Buffer b;
    b.data_ = static_cast<const std::byte*>(data);
    b.size_ = size;
    return b;
  }
  // A copy of the bytes: inside the Buffer up to kInlineBytes, else one heap block.
  static Buffer copy(const void* data, std::size_t size);
  static Buffer copy(std::string_view bytes) { return copy(bytes.data(), bytes.size()); }
  // `size` zero bytes (tests, fuzzers).
  static Buffer zeros(std::size_t size);

  // Takes `owner` in; `bytes_of(const Owner&)` names the bytes it keeps alive
  // (a span of const std::byte), asked once the owner is in place. An owner
  // that does not fit inside (or may throw on move) is kept in a heap block.
  template <class Owner, class BytesOf>
  static Buffer hold(Owner&& owner, BytesOf bytes_of);
  // The owner hold() took, if it is an `Owner` kept inside; else null
  // (a transport taking back its own frame type without a copy).
  template <class Owner>
  Owner* owner_if() {
    return ops_ == &OpsFor<Owner>::kOps ? std::launder(reinterpret_cast<Owner*>(storage_)) : nullptr;
  }

  const void* data() const { return data_; }
  std::size_t size() const { return size_; }
  std::span<const std::byte> bytes() const { return {data_, size_}; }
  std::string to_string() const { return std::string(reinterpret_cast<const char*>(data_), size_); }
  // No owner at all: borrowed bytes (or an empty Buffer).
  bool borrowed() const { return ops_ == nullptr && !is_inline(); }
  // The bytes lie inside the Buffer (copy() of a few bytes).
  bool is_inline() const { return ops_ == nullptr && points_inside(); }

 private:
  struct Ops {
    void (*relocate)(void* to, void* from) noexcept;  // move-construct at `to`, destroy `from`
    void (*destroy)(void* obj) noexcept;
  };
  template <class Owner>
  struct OpsFor {
    static void relocate(void* to, void* from) noexcept {
      Owner* src = std::launder(reinterpret_cast<Owner*>(from));
      ::new (to) Owner(std::move(*src));
      src->~Owner();
    }
    static void destroy(void* obj) noexcept { std::launder(reinterpret_cast<Owner*>(obj))->~Owner(); }
    static constexpr Ops kOps{&relocate, &destroy};
  };
  template <class Owner>
  struct HeapOwner {  // an owner too big to keep inside
    Owner* owner;
    explicit HeapOwner(Owner* o) : owner(o) {}
    HeapOwner(HeapOwner&& other) noexcept : owner(std::exchange(other.owner, nullptr)) {}
    ~HeapOwner() { delete owner; }
  };

  void take(Buffer& other) noexcept {
    size_ = other.size_;
    const bool inside = other.points_inside();
    if (other.ops_ != nullptr) {
      other.ops_->relocate(storage_, other.storage_);
      ops_ = std::exchange(other.ops_, nullptr);
    } else if (inside) {
      std::memcpy(storage_, other.storage_, kInlineBytes);
    }
    data_ = inside ? storage_ + (other.data_ - other.storage_) : other.data_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  bool points_inside() const {
    const auto at = reinterpret_cast<std::uintptr_t>(data_);
    const auto begin = reinterpret_cast<std::uintptr_t>(storage_);
    return data_ != nullptr && at >= begin && at < begin + kInlineBytes;
  }
  void reset() noexcept {
    if (ops_ != nullptr) ops_->destroy(storage_);
    ops_ = nullptr;
    data_ = nullptr;
    size_ = 0;
  }

  alignas(std::max_align_t) std::byte storage_[kInlineBytes];
  const Ops* ops_ = nullptr;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

template <class Owner, class BytesOf>
Buffer Buffer::hold(Owner&& owner, BytesOf bytes_of) {
  using T = std::remove_cvref_t<Owner>;
  Buffer b;
  if constexpr (sizeof(T) <= kInlineBytes && alignof(T) <= alignof(std::max_align_t) &&
                std::is_nothrow_move_constructible_v<T>) {
    T* placed = ::new (static_cast<void*>(b.storage_)) T(std::forward<Owner>(owner));
    b.ops_ = &OpsFor<T>::kOps;
    const std::span<const std::byte> bytes = bytes_of(static_cast<const T&>(*placed));
    b.data_ = bytes.data();
    b.size_ = bytes.size();
  } else {
    T* heap = new T(std::forward<Owner>(owner));
    ::new (static_cast<void*>(b.storage_)) HeapOwner<T>(heap);
    b.ops_ = &OpsFor<HeapOwner<T>>::kOps;
    const std::span<const std::byte> bytes = bytes_of(static_cast<const T&>(*heap));
    b.data_ = bytes.data();
    b.size_ = bytes.size();
  }
  return b;
}

}  // namespace pstrain
