#include "common/base/stream_copy.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace pstrain {

void stream_copy(void* destination, const void* source, std::size_t n) {
#if defined(__x86_64__)
  auto* to = static_cast<char*>(destination);
  const auto* from = static_cast<const char*>(source);
  const std::size_t head = std::min<std::size_t>(n, (16 - reinterpret_cast<std::uintptr_t>(to) % 16) % 16);
  std::memcpy(to, from, head);  // align the stores
  to += head;
  from += head;
  n -= head;
  const std::size_t blocks = n / 64;
  for (std::size_t b = 0; b < blocks; ++b, to += 64, from += 64) {
    const __m128i x0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from));
    const __m128i x1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + 16));
    const __m128i x2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + 32));
    const __m128i x3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(to), x0);
    _mm_stream_si128(reinterpret_cast<__m128i*>(to + 16), x1);
    _mm_stream_si128(reinterpret_cast<__m128i*>(to + 32), x2);
    _mm_stream_si128(reinterpret_cast<__m128i*>(to + 48), x3);
  }
  _mm_sfence();
  std::memcpy(to, from, n - blocks * 64);
#else
  std::memcpy(destination, source, n);
#endif
}

}  // namespace pstrain
