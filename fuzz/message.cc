// libFuzzer target: decode_message (common/wire/protocol.h) on 1-4 frames.
// Input: a byte with the frame count (1 + b % 4), then per frame but the
// last a 2-byte little-endian length; the last frame takes the rest.
#include <vector>

#include "common/base/errors.h"
#include "common/wire/protocol.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  pstrain::fuzz::Input in(data, size);
  const int count = 1 + in.byte() % 4;
  std::vector<pstrain::Buffer> frames;
  for (int i = 0; i < count; ++i) {
    std::span<const std::byte> bytes;
    if (i + 1 < count) {
      const std::size_t n = in.byte() | (static_cast<std::size_t>(in.byte()) << 8);
      bytes = in.take(n);
    } else {
      bytes = in.rest();
    }
    frames.push_back(pstrain::Buffer::copy(bytes.data(), bytes.size()));
  }
  try {
    const pstrain::Message m = pstrain::decode_message(frames, pstrain::DecodeLimits{std::int64_t{1} << 16});
    std::vector<float> scratch;
    if (m.header.dtype == pstrain::DType::kFloat32) (void)m.float_payload(scratch);
    if (m.header.dtype == pstrain::DType::kBytes) (void)m.text_payload();
    // A run (kPushChunks, kPullChunks): the single requests it stands for name
    // chunk ids >= 0 and request ids after the run's, as the server serves them.
    if (m.header.type == pstrain::MsgType::kPushChunks || m.header.type == pstrain::MsgType::kPullChunks) {
      for (std::int64_t i = 0; i < m.header.version; ++i) {
        const pstrain::Header one = pstrain::chunk_request(m.header, i, 0);
        if (one.key < 0 || one.request_id < m.header.request_id) __builtin_trap();
      }
    }
  } catch (const pstrain::ProtocolError&) {
    // refused: what a node answers with an error reply
  }
  return 0;
}
