// Header codec round trips, and every rejection rule of decode_message fed
// its bad input.
#include <doctest/doctest.h>

#include <cstring>
#include <limits>

#include "common/base/errors.h"
#include "common/wire/protocol.h"
#include "common/transport/transport.h"
#include "common/wire/wire_archive.h"
#include "tests/support/throw_text.h"

using namespace pstrain;

namespace {

Header push_header(std::int64_t num_elems) {
  Header h;
  h.type = MsgType::kPush;
  h.role = Role::kWorker;
  h.dtype = DType::kFloat32;
  h.sender = 3;
  h.request_id = 77;
  h.key = 17;
  h.step = 5;
  h.num_elems = num_elems;
  h.lr = 0.125;
  return h;
}

std::vector<Buffer> frames_of(const Header& h, std::size_t payload_bytes, bool with_payload = true) {
  std::vector<Buffer> frames;
  frames.push_back(encode_header(h));
  if (with_payload) frames.push_back(Buffer::zeros(payload_bytes));
  return frames;
}

std::string decode_error(std::vector<Buffer> frames, DecodeLimits limits = {}) {
  return pstrain::test::thrown_text<ProtocolError>([&] { decode_message(frames, limits); });
}

// Re-encodes a header after changing one raw byte range (for fields whose
// enum types cannot hold bad values).
Buffer patched_header(const Header& h, std::size_t offset, std::uint8_t value) {
  std::string bytes = wire_encode(h);
  bytes[offset] = static_cast<char>(value);
  return Buffer::copy(bytes);
}

}  // namespace

TEST_CASE("header round trip keeps every field") {
  Header h = push_header(1024);
  h.type = MsgType::kPullReply;  // a push's aux is only kPushGradient or kPushSkip
  h.version = 9;
  h.aux = -4;
  h.status = Status::kRejected;
  std::vector<Buffer> frames = frames_of(h, 4096);
  Message m = decode_message(frames, {});
  CHECK(m.header.type == MsgType::kPullReply);
  CHECK(m.header.role == Role::kWorker);
  CHECK(m.header.sender == 3);
  CHECK(m.header.request_id == 77);
  CHECK(m.header.key == 17);
  CHECK(m.header.step == 5);
  CHECK(m.header.version == 9);
  CHECK(m.header.aux == -4);
  CHECK(m.header.status == Status::kRejected);
  CHECK(m.header.lr == 0.125);
  CHECK(m.has_payload);
  CHECK(m.payload.size() == 4096);
  CHECK(header_wire_bytes() == wire_encode(Header{}).size());
}

TEST_CASE("every message type round trips") {
  for (int t = static_cast<int>(MsgType::kRegister); t <= static_cast<int>(MsgType::kLast); ++t) {
    Header h;
    h.type = static_cast<MsgType>(t);
    CAPTURE(to_string(h.type));
    const std::string bytes = wire_encode(h);
    CHECK(wire_decode<Header>(std::as_bytes(std::span(bytes)), "header").type == h.type);
  }
}

TEST_CASE("frame count is checked") {
  CHECK(decode_error({}).find("0 frames") != std::string::npos);
  std::vector<Buffer> three = frames_of(push_header(1), 4);
  three.push_back(Buffer::zeros(4));
  CHECK(decode_error(std::move(three)).find("3 frames") != std::string::npos);
}

TEST_CASE("header size, magic and version are checked") {
  std::vector<Buffer> short_header;
  short_header.push_back(Buffer::zeros(10));
  CHECK(decode_error(std::move(short_header)).find("header frame is 10 bytes") != std::string::npos);

  Header bad_magic = push_header(1);
  bad_magic.magic = 0xdeadbeef;
  CHECK(decode_error(frames_of(bad_magic, 4)).find("bad magic 0xdeadbeef") != std::string::npos);

  Header bad_version = push_header(1);
  bad_version.proto_version = 99;
  CHECK(decode_error(frames_of(bad_version, 4)).find("protocol version 99") != std::string::npos);
}

TEST_CASE("unknown type, role, dtype and status codes are rejected") {
  const Header h = push_header(1);
  // Field offsets in the encoded header: magic(4) version(2) type(1) role(1) dtype(1) status(1).
  auto one = [&](std::size_t offset, std::uint8_t value) {
    std::vector<Buffer> frames;
    frames.push_back(patched_header(h, offset, value));
    frames.push_back(Buffer::zeros(4));
    return decode_error(std::move(frames));
  };
  CHECK(one(6, 0).find("unknown message type 0") != std::string::npos);
  CHECK(one(6, 200).find("unknown message type 200") != std::string::npos);
  CHECK(one(7, 9).find("unknown role 9") != std::string::npos);
  CHECK(one(8, 7).find("unknown dtype code 7") != std::string::npos);
  CHECK(one(9, 42).find("unknown status code 42") != std::string::npos);
  CHECK(one(9, 7).find("unknown status code 7") != std::string::npos);  // 5 retry later and 6 refused are the last
}

TEST_CASE("payload rules per type") {
  SUBCASE("push without payload") {
    CHECK(decode_error(frames_of(push_header(1), 0, false)).find("payload frame missing") != std::string::npos);
  }
  SUBCASE("size must equal num_elems * 4") {
    const std::string err = decode_error(frames_of(push_header(1024), 4092));
    CHECK(err.find("push from worker 3 (key 17): expected 4096 payload bytes for 1024 float32 elements, got 4092") !=
          std::string::npos);
  }
  SUBCASE("wrong dtype for float data") {
    Header h = push_header(1);
    h.dtype = DType::kBytes;
    CHECK(decode_error(frames_of(h, 4)).find("expected dtype float32") != std::string::npos);
  }
  SUBCASE("negative or oversized element counts") {
    CHECK(decode_error(frames_of(push_header(-1), 4)).find("num_elems -1 outside") != std::string::npos);
    DecodeLimits small{1024};
    CHECK(decode_error(frames_of(push_header(1000), 4000), small).find("num_elems 1000 outside [0, 256]") !=
          std::string::npos);
  }
  SUBCASE("heartbeat must carry nothing") {
    Header h;
    h.type = MsgType::kHeartbeat;
    CHECK(decode_error(frames_of(h, 8)).find("carries no payload") != std::string::npos);
  }
  SUBCASE("no payload but num_elems set") {
    Header h;
    h.type = MsgType::kPull;
    h.num_elems = 5;
    CHECK(decode_error(frames_of(h, 0, false)).find("no payload but dtype/num_elems set") != std::string::npos);
  }
  SUBCASE("control body cap") {
    Header h;
    h.type = MsgType::kAbort;
    h.dtype = DType::kBytes;
    CHECK(decode_error(frames_of(h, kMaxBodyBytes + 1)).find("exceeds the") != std::string::npos);
  }
}

TEST_CASE("bounded archive refuses length prefixes beyond the frame") {
  RegisterReply reply;
  reply.server_endpoints = {"tcp://a:1", "tcp://b:2"};
  reply.layout.add("w", {3, 4});
  std::string bytes = wire_encode(reply);
  auto back = wire_decode<RegisterReply>(std::as_bytes(std::span(bytes)), "register reply");
  CHECK(back.server_endpoints == reply.server_endpoints);
  CHECK(back.layout.total_elems() == 12);

  // Claim 2^40 endpoints: rejected before any allocation.
  std::string hostile = bytes;
  const std::uint64_t huge = std::uint64_t{1} << 40;
  std::memcpy(hostile.data() + 12, &huge, sizeof(huge));  // after rank, num_servers, num_workers
  try {
    wire_decode<RegisterReply>(std::as_bytes(std::span(hostile)), "register reply");
    FAIL("hostile length accepted");
  } catch (const ProtocolError& e) {
    CHECK(std::string(e.what()).find("length prefix 1099511627776 exceeds") != std::string::npos);
  }
  // Truncated and trailing bytes.
  CHECK_THROWS_WITH_AS(wire_decode<RegisterReply>(std::as_bytes(std::span(bytes)).first(bytes.size() - 3), "register reply"),
                       doctest::Contains("truncated"), ProtocolError);
  std::string trailing = bytes + "xy";
  CHECK_THROWS_WITH_AS(wire_decode<RegisterReply>(std::as_bytes(std::span(trailing)), "register reply"),
                       doctest::Contains("2 trailing bytes"), ProtocolError);
}

TEST_CASE("received layouts are validated") {
  ParamLayout layout;
  layout.add("a", {2, 3});
  layout.add("b", {4});
  layout.validate();
  std::string bytes = wire_encode(layout);
  // Corrupt the first tensor's offset (vector size 8 + name size 8 + "a" 1 + shape size 8 + 2 dims 16 = 41).
  const std::int64_t bad_offset = 5;
  std::memcpy(bytes.data() + 8 + 8 + 1 + 8 + 16, &bad_offset, sizeof(bad_offset));
  auto back = wire_decode<ParamLayout>(std::as_bytes(std::span(bytes)), "layout");
  CHECK_THROWS_WITH_AS(back.validate(), doctest::Contains("tensor 'a' has offset 5"), ProtocolError);
}

TEST_CASE("float payload view handles unaligned buffers") {
  std::vector<char> raw(4 * 4 + 1);
  const float values[4] = {1, 2, 3, 4};
  std::memcpy(raw.data() + 1, values, sizeof(values));
  Message m;
  m.header.num_elems = 4;
  m.payload = Buffer::borrow(raw.data() + 1, sizeof(values));
  m.has_payload = true;
  std::vector<float> scratch;
  auto view = m.float_payload(scratch);
  REQUIRE(view.size() == 4);
  CHECK(view[0] == 1);
  CHECK(view[3] == 4);
}

TEST_CASE("store messages need a body and store entries are validated") {
  Header get;
  get.type = MsgType::kStoreGet;
  CHECK(decode_error(frames_of(get, 0, false)).find("store-get from worker -1: payload frame missing") !=
        std::string::npos);
  StoreEntry entry{"collective/nccl_unique_id", std::string(128, '\0')};
  CHECK_NOTHROW(validate_store_entry(entry, "store set"));
  const std::string bytes = wire_encode(entry);
  const StoreEntry back = wire_decode<StoreEntry>(std::as_bytes(std::span(bytes)), "store entry");
  CHECK(back.key == entry.key);
  CHECK(back.value == entry.value);
  CHECK_THROWS_WITH_AS(validate_store_entry(StoreEntry{"", "v"}, "store set"),
                       "store set: key of 0 bytes, expected 1 to 256", ProtocolError);
  CHECK_THROWS_WITH_AS(validate_store_entry(StoreEntry{std::string(257, 'k'), "v"}, "store get"),
                       "store get: key of 257 bytes, expected 1 to 256", ProtocolError);
  CHECK_THROWS_WITH_AS(validate_store_entry(StoreEntry{"k", std::string(kMaxStoreValueBytes + 1, 'v')}, "store set"),
                       "store set of key 'k': value of 65537 bytes exceeds the 65536-byte limit", ProtocolError);
}

namespace {

Header run_header(MsgType type, std::int64_t count, std::int64_t num_elems) {
  Header h = push_header(num_elems);
  h.type = type;
  h.version = count;
  if (type == MsgType::kPullChunks) {
    h.dtype = DType::kNone;
    h.lr = 0.0;
  }
  return h;
}

}  // namespace

TEST_CASE("several chunks per message: a run's count, first chunk, request ids and payload are checked") {
  SUBCASE("well-formed runs decode") {
    std::vector<Buffer> push = frames_of(run_header(MsgType::kPushChunks, 3, 10), 40);
    const Message m = decode_message(push, DecodeLimits{});
    CHECK(m.header.type == MsgType::kPushChunks);
    CHECK(m.header.version == 3);
    CHECK(m.payload.size() == 40);
    std::vector<Buffer> pull = frames_of(run_header(MsgType::kPullChunks, kMaxChunksPerMessage, 0), 0, false);
    CHECK(decode_message(pull, DecodeLimits{}).header.version == kMaxChunksPerMessage);
    Header skip = run_header(MsgType::kPushChunks, 2, 0);
    skip.dtype = DType::kNone;
    skip.aux = kPushSkip;
    std::vector<Buffer> skips = frames_of(skip, 0, false);
    CHECK(decode_message(skips, DecodeLimits{}).header.aux == kPushSkip);
  }
  SUBCASE("the chunk count (version) is 1..kMaxChunksPerMessage") {
    for (const MsgType type : {MsgType::kPushChunks, MsgType::kPullChunks}) {
      CAPTURE(to_string(type));
      const bool push = type == MsgType::kPushChunks;
      for (const std::int64_t count : {std::int64_t{0}, std::int64_t{-1}, kMaxChunksPerMessage + 1}) {
        CAPTURE(count);
        const std::string err = decode_error(frames_of(run_header(type, count, push ? 1 : 0), 4, push));
        CHECK(err.find("chunk count (version) " + std::to_string(count) + " outside [1, 64]") != std::string::npos);
      }
    }
  }
  SUBCASE("the first chunk is a chunk id and the run's ids fit") {
    Header negative = run_header(MsgType::kPullChunks, 2, 0);
    negative.key = -3;
    CHECK(decode_error(frames_of(negative, 0, false)).find("first chunk -3 is not a chunk id") != std::string::npos);
    Header last = run_header(MsgType::kPullChunks, 2, 0);
    last.key = std::numeric_limits<std::int64_t>::max() - 1;
    CHECK(decode_error(frames_of(last, 0, false)).find("is not a chunk id") != std::string::npos);
    Header ids = run_header(MsgType::kPullChunks, 5, 0);
    ids.request_id = std::numeric_limits<std::uint64_t>::max() - 2;
    CHECK(decode_error(frames_of(ids, 0, false)).find("leaves no room for 5 chunks' ids") != std::string::npos);
  }
  SUBCASE("payloads: float32 gradients only, none for a skip or a pull, sizes as for one chunk") {
    CHECK(decode_error(frames_of(run_header(MsgType::kPushChunks, 2, 4), 0, false)).find("payload frame missing") !=
          std::string::npos);
    CHECK(decode_error(frames_of(run_header(MsgType::kPushChunks, 2, 4), 12))
              .find("expected 16 payload bytes for 4 float32 elements, got 12") != std::string::npos);
    Header bf16 = run_header(MsgType::kPushChunks, 2, 4);
    bf16.dtype = DType::kBFloat16;
    CHECK(decode_error(frames_of(bf16, 8)).find("expected dtype float32, got code 3") != std::string::npos);
    Header skip = run_header(MsgType::kPushChunks, 2, 1);
    skip.aux = kPushSkip;
    CHECK(decode_error(frames_of(skip, 4)).find("carries no payload") != std::string::npos);
    Header bad_aux = run_header(MsgType::kPushChunks, 2, 1);
    bad_aux.aux = 7;
    CHECK(decode_error(frames_of(bad_aux, 4)).find("aux 7 is neither") != std::string::npos);
    CHECK(decode_error(frames_of(run_header(MsgType::kPullChunks, 2, 0), 4)).find("carries no payload") !=
          std::string::npos);
    Header pull_dtype = run_header(MsgType::kPullChunks, 2, 0);
    pull_dtype.aux = 2;
    CHECK(decode_error(frames_of(pull_dtype, 0, false)).find("asks for no known reply dtype") != std::string::npos);
  }
}

TEST_CASE("chunk_request: chunk i of a run is the single request for key + i with request id + i") {
  Header run = run_header(MsgType::kPushChunks, 3, 30);
  const Header second = chunk_request(run, 1, 12);
  CHECK(second.type == MsgType::kPush);
  CHECK(second.key == run.key + 1);
  CHECK(second.request_id == run.request_id + 1);
  CHECK(second.version == 0);
  CHECK(second.num_elems == 12);
  CHECK(second.dtype == DType::kFloat32);
  CHECK(second.step == run.step);
  CHECK(second.lr == run.lr);
  CHECK(second.sender == run.sender);
  run.aux = kPushSkip;
  CHECK(chunk_request(run, 2, 0).dtype == DType::kNone);
  Header pull = run_header(MsgType::kPullChunks, 2, 0);
  pull.aux = static_cast<std::int64_t>(DType::kBFloat16);
  const Header one = chunk_request(pull, 1, 0);
  CHECK(one.type == MsgType::kPull);
  CHECK(one.key == pull.key + 1);
  CHECK(one.aux == static_cast<std::int64_t>(DType::kBFloat16));
  CHECK(one.num_elems == 0);
}
