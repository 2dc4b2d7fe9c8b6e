// bfloat16 on the wire (ps.wire_dtype): rounding, non-finite values, and the
// protocol's rules for bfloat16 payloads.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/base/bfloat16.h"
#include "common/base/errors.h"
#include "common/wire/protocol.h"
#include "common/transport/transport.h"
#include "tests/support/throw_text.h"

using namespace pstrain;

namespace {

float round_trip(float v) { return from_bfloat16(to_bfloat16(v)); }

std::string decode_error(Header h, std::size_t payload_bytes, bool with_payload = true) {
  std::vector<Buffer> frames;
  frames.push_back(encode_header(h));
  if (with_payload) frames.push_back(Buffer::zeros(payload_bytes));
  return pstrain::test::thrown_text<ProtocolError>([&] { decode_message(frames, DecodeLimits{}); });
}

Header tensor_header(MsgType type, DType dtype, std::int64_t num_elems) {
  Header h;
  h.type = type;
  h.role = type == MsgType::kPullReply ? Role::kServer : Role::kWorker;
  h.dtype = dtype;
  h.sender = 1;
  h.key = 4;
  h.num_elems = num_elems;
  return h;
}

}  // namespace

TEST_CASE("bfloat16 round trip: relative error at most 2^-8 for every value") {
  // A sweep over many magnitudes, both signs, and every mantissa pattern of a few exponents.
  std::vector<float> values;
  for (int e = -126; e <= 127; e += 7) {
    for (std::uint32_t m = 0; m < (1u << 23); m += 40961) {
      const std::uint32_t bits = (static_cast<std::uint32_t>(e + 127) << 23) | m;
      values.push_back(std::bit_cast<float>(bits));
      values.push_back(-std::bit_cast<float>(bits));
    }
  }
  values.push_back(0.1f);
  values.push_back(-3.14159265f);
  values.push_back(65504.0f);
  int checked = 0;
  for (float v : values) {
    const float r = round_trip(v);
    REQUIRE(std::isfinite(r));
    CHECK(std::fabs(r - v) <= std::ldexp(std::fabs(v), -8));
    CHECK(std::signbit(r) == std::signbit(v));
    ++checked;
  }
  CHECK(checked > 1000);
  // Exact for values bfloat16 holds: zero (both signs), small integers, powers of two.
  for (float v : {0.0f, -0.0f, 1.0f, -2.0f, 3.0f, 255.0f, 256.0f, std::ldexp(1.0f, -100)}) {
    CHECK(std::bit_cast<std::uint32_t>(round_trip(v)) == std::bit_cast<std::uint32_t>(v));
  }
}

TEST_CASE("bfloat16 rounds to nearest, ties to even") {
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties to the even mantissa (1).
  CHECK(round_trip(1.0f + std::ldexp(1.0f, -8)) == 1.0f);
  // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): up.
  CHECK(round_trip(1.0f + 3 * std::ldexp(1.0f, -8)) == 1.0f + std::ldexp(1.0f, -6));
  // Just above half way rounds up; just below rounds down.
  CHECK(round_trip(std::nextafter(1.0f + std::ldexp(1.0f, -8), 2.0f)) == 1.0f + std::ldexp(1.0f, -7));
  CHECK(round_trip(std::nextafter(1.0f + std::ldexp(1.0f, -8), 0.0f)) == 1.0f);
  // A carry into the exponent: the largest mantissa below 2 rounds to 2.
  CHECK(round_trip(std::nextafter(2.0f, 0.0f)) == 2.0f);
}

TEST_CASE("bfloat16 keeps NaN and Inf non-finite") {
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(round_trip(inf) == inf);
  CHECK(round_trip(-inf) == -inf);
  CHECK(std::isnan(round_trip(std::numeric_limits<float>::quiet_NaN())));
  // A signalling NaN whose payload lies only in the low 16 bits must not become Inf.
  const float low_payload_nan = std::bit_cast<float>(0x7f800001u);
  REQUIRE(std::isnan(low_payload_nan));
  CHECK(std::isnan(round_trip(low_payload_nan)));
  CHECK(std::isnan(round_trip(-low_payload_nan)));
  // Above bfloat16's largest finite value: rounds to Inf (still caught as non-finite).
  CHECK(std::isinf(round_trip(std::numeric_limits<float>::max())));
  // The span versions agree with the scalar ones.
  const std::vector<float> in{1.5f, inf, low_payload_nan, -0.3f};
  std::vector<std::uint16_t> narrow(in.size());
  std::vector<float> wide(in.size());
  to_bfloat16(in, narrow);
  from_bfloat16(narrow, wide);
  CHECK(wide[0] == 1.5f);
  CHECK(std::isinf(wide[1]));
  CHECK(std::isnan(wide[2]));
  CHECK(wide[3] == round_trip(-0.3f));
  std::vector<float> rounded = in;
  round_to_bfloat16(rounded);
  CHECK(rounded[3] == wide[3]);
}

TEST_CASE("protocol: bfloat16 payloads only on pushes and pull replies, two bytes per element") {
  CHECK(decode_error(tensor_header(MsgType::kPush, DType::kBFloat16, 8), 16).empty());
  CHECK(decode_error(tensor_header(MsgType::kPullReply, DType::kBFloat16, 8), 16).empty());
  // Four bytes per element is a float32 size, not a bfloat16 one.
  CHECK(decode_error(tensor_header(MsgType::kPush, DType::kBFloat16, 8), 32)
            .find("expected 16 payload bytes for 8 bfloat16 elements, got 32") != std::string::npos);
  CHECK(decode_error(tensor_header(MsgType::kPullReply, DType::kBFloat16, 8), 15).find("got 15") != std::string::npos);
  // Initial weights are float32 only.
  CHECK(decode_error(tensor_header(MsgType::kInit, DType::kBFloat16, 8), 16).find("expected dtype float32, got code 3") !=
        std::string::npos);
  CHECK(decode_error(tensor_header(MsgType::kPush, DType::kBytes, 8), 16)
            .find("expected dtype float32 or bfloat16") != std::string::npos);
  // The element cap counts two bytes per element.
  std::vector<Buffer> frames;
  frames.push_back(encode_header(tensor_header(MsgType::kPush, DType::kBFloat16, 600)));
  frames.push_back(Buffer::zeros(1200));
  std::string err;
  try {
    decode_message(frames, DecodeLimits{1024});
  } catch (const ProtocolError& e) {
    err = e.what();
  }
  CHECK(err.find("num_elems 600 outside [0, 512]") != std::string::npos);
}

TEST_CASE("protocol: a pull names its reply dtype in aux") {
  Header pull = tensor_header(MsgType::kPull, DType::kNone, 0);
  CHECK(pull_reply_dtype(pull) == DType::kFloat32);
  pull.aux = static_cast<std::int64_t>(DType::kFloat32);
  CHECK(pull_reply_dtype(pull) == DType::kFloat32);
  pull.aux = static_cast<std::int64_t>(DType::kBFloat16);
  CHECK(pull_reply_dtype(pull) == DType::kBFloat16);
  CHECK(decode_error(pull, 0, false).empty());
  pull.aux = static_cast<std::int64_t>(DType::kBytes);
  CHECK(decode_error(pull, 0, false).find("asks for no known reply dtype") != std::string::npos);
  pull.aux = -1;
  CHECK_THROWS_AS(pull_reply_dtype(pull), ProtocolError);
}

TEST_CASE("bfloat16 payloads decode straight into the destination, aligned or not") {
  const std::vector<float> values{1.0f, -2.5f, 0.1f, 1e30f};
  std::vector<std::uint16_t> narrow(values.size());
  to_bfloat16(values, narrow);
  std::vector<char> raw(narrow.size() * 2 + 1);
  for (const std::size_t shift : {std::size_t{0}, std::size_t{1}}) {
    std::memcpy(raw.data() + shift, narrow.data(), narrow.size() * 2);
    Message m;
    m.header.type = MsgType::kPullReply;
    m.header.dtype = DType::kBFloat16;
    m.header.num_elems = static_cast<std::int64_t>(values.size());
    m.payload = Buffer::borrow(raw.data() + shift, narrow.size() * 2);
    m.has_payload = true;
    std::vector<float> dest(values.size());
    m.copy_floats_to(dest);
    for (std::size_t i = 0; i < values.size(); ++i) CHECK(dest[i] == round_trip(values[i]));
    std::vector<float> scratch;
    const auto view = m.float_payload(scratch);
    REQUIRE(view.size() == values.size());
    CHECK(view[1] == -2.5f);
    std::vector<float> wrong_size(3);
    CHECK_THROWS_AS(m.copy_floats_to(wrong_size), ProtocolError);
  }
  // A Payload of bfloat16 values sends as such.
  Payload p = Payload::bfloat16(narrow);
  CHECK(p.dtype() == DType::kBFloat16);
  CHECK(p.num_elems() == 4);
  CHECK(std::move(p).to_buffer().size() == 8);
}

TEST_CASE("copy_floats_to with streaming stores writes exactly the payload, whatever the destination's alignment and size") {
  // Big enough for the streaming path (256 KiB), with head and tail bytes
  // outside whole 64-byte blocks: destinations shifted by 0..3 floats.
  for (const std::size_t n : {std::size_t{7}, std::size_t{65536}, std::size_t{65536 + 13}, std::size_t{300001}}) {
    for (std::size_t shift = 0; shift < 4; ++shift) {
      CAPTURE(n);
      CAPTURE(shift);
      std::vector<float> values(n);
      for (std::size_t i = 0; i < n; ++i) values[i] = static_cast<float>(i) * 0.5f - 7.0f;
      Message m;
      m.header.type = MsgType::kPullReply;
      m.header.dtype = DType::kFloat32;
      m.header.num_elems = static_cast<std::int64_t>(n);
      m.payload = Buffer::copy(values.data(), n * sizeof(float));
      m.has_payload = true;
      std::vector<float> raw(n + 8, -1.0f);
      const std::span<float> dest(raw.data() + shift, n);
      m.copy_floats_to(dest, /*streaming=*/true);
      CHECK(std::equal(values.begin(), values.end(), dest.begin()));
      for (std::size_t i = 0; i < shift; ++i) CHECK(raw[i] == -1.0f);  // nothing written outside
      for (std::size_t i = shift + n; i < raw.size(); ++i) CHECK(raw[i] == -1.0f);
    }
  }
}
