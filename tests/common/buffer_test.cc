// Buffer (common/wire/buffer.h): bytes and their keep-alive through moves,
// and the ZeroMQ frames it holds and gives back (common/transport/zmq/zmq_socket.h).
#include <doctest/doctest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/transport/transport.h"
#include "common/transport/zmq/zmq_socket.h"
#include "common/wire/buffer.h"

using namespace pstrain;

namespace {
// The bytes lie inside the Buffer object itself (so they must follow it when it moves).
bool lies_inside(const Buffer& b) {
  const auto* at = static_cast<const char*>(b.data());
  const auto* self = reinterpret_cast<const char*>(&b);
  return at >= self && at < self + sizeof(Buffer);
}
}  // namespace

TEST_CASE("buffer: a few bytes live inside it and follow it through moves") {
  Buffer a = Buffer::copy(std::string_view("twelve bytes"));
  CHECK(a.is_inline());
  std::vector<Buffer> many;
  many.push_back(std::move(a));
  for (int i = 0; i < 40; ++i) many.push_back(Buffer::copy(std::to_string(i)));  // reallocations move them
  CHECK(many.front().to_string() == "twelve bytes");
  CHECK(lies_inside(many.front()));
  CHECK(a.size() == 0);
  CHECK(many[40].to_string() == "39");
  Buffer big = Buffer::copy(std::string(1000, 'x'));
  CHECK(!big.is_inline());
  CHECK(big.to_string() == std::string(1000, 'x'));
  CHECK(Buffer::zeros(3).to_string() == std::string(3, '\0'));
}

TEST_CASE("buffer: an owner it holds stays alive until the last move of it goes") {
  auto owner = std::make_shared<std::vector<float>>(std::vector<float>{1, 2, 3});
  const std::weak_ptr<std::vector<float>> watch = owner;
  const float* at = owner->data();
  Buffer b = Buffer::hold(std::move(owner), [](const std::shared_ptr<std::vector<float>>& v) {
    return std::as_bytes(std::span<const float>(*v));
  });
  CHECK(b.data() == at);
  Buffer moved = std::move(b);
  CHECK(!watch.expired());
  CHECK(moved.data() == at);
  CHECK(moved.size() == 3 * sizeof(float));
  moved = Buffer();
  CHECK(watch.expired());
}

TEST_CASE("buffer: a borrowed span is not copied") {
  const float values[2] = {1.5f, 2.5f};
  const Buffer b = Buffer::borrow(values, sizeof values);
  CHECK(b.borrowed());
  CHECK(b.data() == values);
}

TEST_CASE("buffer: a received ZeroMQ frame moves in and back out without a copy") {
  // A short frame keeps its bytes inside the zmq message itself: they must move with it.
  zmq::message_t small("hi there", 8);
  Buffer s = to_buffer(std::move(small));
  std::vector<Buffer> frames;
  frames.push_back(std::move(s));
  frames.push_back(Buffer());
  frames.push_back(Buffer());  // a reallocation moves the first again
  CHECK(frames.front().to_string() == "hi there");
  CHECK(lies_inside(frames.front()));

  std::string text(4096, 'z');
  zmq::message_t large(text.data(), text.size());
  const void* at = large.data();
  Buffer l = to_buffer(std::move(large));
  CHECK(l.data() == at);
  Buffer l2 = std::move(l);
  zmq::message_t back = to_message(std::move(l2));
  CHECK(back.data() == at);  // the same frame, handed back
  CHECK(back.size() == text.size());
}

TEST_CASE("buffer: a payload's keep-alive goes with the frame it is sent as") {
  auto values = std::make_shared<std::vector<float>>(1024, 0.5f);
  const std::weak_ptr<std::vector<float>> watch = values;
  const float* at = values->data();
  Payload p = Payload::floats(*values, values);
  values.reset();
  zmq::message_t frame = to_message(std::move(p).to_buffer());
  CHECK(frame.data() == at);  // zero-copy
  CHECK(!watch.expired());
  frame = zmq::message_t();
  CHECK(watch.expired());
}
