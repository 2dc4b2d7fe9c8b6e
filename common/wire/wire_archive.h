// Cereal archives for wire data. WireOutputArchive appends the raw bytes of
// each value to a string (native little-endian layout, as cereal's binary
// archive; every supported host is little-endian). BoundedInputArchive: it reads from a byte span and refuses any length
// prefix larger than the bytes left, so a hostile frame cannot make a decode
// allocate more than a small multiple of its own size. Every failure is a
// ProtocolError naming what was being decoded.
#pragma once

#include <cereal/cereal.hpp>
#include <cereal/types/common.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>

#include "common/base/errors.h"

namespace pstrain {

class WireOutputArchive : public cereal::OutputArchive<WireOutputArchive, cereal::AllowEmptyClassElision> {
 public:
  explicit WireOutputArchive(std::string& out)
      : cereal::OutputArchive<WireOutputArchive, cereal::AllowEmptyClassElision>(this), out_(out) {}
  void saveBinary(const void* data, std::size_t num_bytes) { out_.append(static_cast<const char*>(data), num_bytes); }

 private:
  std::string& out_;
};

class BoundedInputArchive : public cereal::InputArchive<BoundedInputArchive, cereal::AllowEmptyClassElision> {
 public:
  explicit BoundedInputArchive(std::span<const std::byte> bytes)
      : cereal::InputArchive<BoundedInputArchive, cereal::AllowEmptyClassElision>(this), bytes_(bytes) {}

  void loadBinary(void* data, std::size_t num_bytes) {
    if (num_bytes > remaining()) {
      throw ProtocolError("truncated: needed " + std::to_string(num_bytes) + " more bytes, " +
                          std::to_string(remaining()) + " left");
    }
    if (num_bytes == 0) return;  // data may be null (an empty vector): memcpy must not see it
    std::memcpy(data, bytes_.data() + pos_, num_bytes);
    pos_ += num_bytes;
  }
  std::size_t remaining() const { return bytes_.size() - pos_; }

 private:
  std::span<const std::byte> bytes_;
  std::size_t pos_ = 0;
};

template <class T>
inline std::enable_if_t<std::is_arithmetic_v<T>> CEREAL_SAVE_FUNCTION_NAME(WireOutputArchive& ar, const T& t) {
  ar.saveBinary(std::addressof(t), sizeof(t));
}

template <class T>
inline void CEREAL_SERIALIZE_FUNCTION_NAME(WireOutputArchive& ar, cereal::NameValuePair<T>& t) {
  ar(t.value);
}

template <class T>
inline void CEREAL_SERIALIZE_FUNCTION_NAME(WireOutputArchive& ar, cereal::SizeTag<T>& t) {
  const auto size = static_cast<std::uint64_t>(t.size);
  ar.saveBinary(&size, sizeof(size));
}

template <class T>
inline void CEREAL_SAVE_FUNCTION_NAME(WireOutputArchive& ar, const cereal::BinaryData<T>& bd) {
  ar.saveBinary(bd.data, static_cast<std::size_t>(bd.size));
}

template <class T>
inline std::enable_if_t<std::is_arithmetic_v<T>> CEREAL_LOAD_FUNCTION_NAME(BoundedInputArchive& ar, T& t) {
  ar.loadBinary(std::addressof(t), sizeof(t));
}

template <class T>
inline void CEREAL_SERIALIZE_FUNCTION_NAME(BoundedInputArchive& ar, cereal::NameValuePair<T>& t) {
  ar(t.value);
}

// A length prefix: every element takes at least one byte on the wire.
template <class T>
inline void CEREAL_SERIALIZE_FUNCTION_NAME(BoundedInputArchive& ar, cereal::SizeTag<T>& t) {
  std::uint64_t size = 0;
  ar.loadBinary(&size, sizeof(size));
  if (size > ar.remaining()) {
    throw ProtocolError("length prefix " + std::to_string(size) + " exceeds the " +
                        std::to_string(ar.remaining()) + " bytes left");
  }
  t.size = static_cast<std::remove_reference_t<T>>(size);
}

template <class T>
inline void CEREAL_LOAD_FUNCTION_NAME(BoundedInputArchive& ar, cereal::BinaryData<T>& bd) {
  ar.loadBinary(bd.data, static_cast<std::size_t>(bd.size));
}

// Encodes a value with cereal's binary archive.
template <class T>
std::string wire_encode(const T& value) {
  std::string out;
  {
    WireOutputArchive ar(out);
    ar(value);
  }
  return out;
}

// Decodes a value; the bytes must be consumed exactly. `what` names the value
// in errors ("register body").
template <class T>
T wire_decode(std::span<const std::byte> bytes, const char* what) {
  T value{};
  try {
    BoundedInputArchive ar(bytes);
    ar(value);
    if (ar.remaining() != 0) {
      throw ProtocolError(std::to_string(ar.remaining()) + " trailing bytes");
    }
  } catch (const ProtocolError& e) {
    throw ProtocolError(std::string("decode of ") + what + ": " + e.what());
  } catch (const std::exception& e) {  // cereal::Exception, std::length_error
    throw ProtocolError(std::string("decode of ") + what + ": " + e.what());
  }
  return value;
}

}  // namespace pstrain

CEREAL_SETUP_ARCHIVE_TRAITS(pstrain::BoundedInputArchive, pstrain::WireOutputArchive)
