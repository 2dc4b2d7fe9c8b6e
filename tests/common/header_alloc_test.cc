// A message's header is encoded with no heap allocation (common/wire/protocol.cc, encode_header):
// every node encodes one per message, and a barrier's release is 1,024 of them in a row
// (docs/scaling.md). Counted by replacing the global operator new in this test binary: it counts
// the calling thread's allocations while a case asks it to, and otherwise only forwards to malloc.
#include <doctest/doctest.h>

#include <cstdlib>
#include <new>

#include "common/wire/protocol.h"
#include "common/wire/wire_archive.h"

namespace {
thread_local bool counting = false;
thread_local int allocations = 0;
}  // namespace

void* operator new(std::size_t size) {
  if (counting) ++allocations;
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t /*size*/) noexcept { std::free(p); }

using namespace pstrain;

TEST_CASE("encode_header: no heap allocation per header, the same bytes as wire_encode") {
  Header h;
  h.type = MsgType::kBarrierReply;
  h.key = 123456789;
  h.step = 42;
  h.request_id = 7;
  (void)encode_header(h);  // the thread's first header may size its scratch
  counting = true;
  allocations = 0;
  Buffer head;
  for (int i = 0; i < 1000; ++i) head = encode_header(h);
  counting = false;
  CHECK(allocations == 0);
  const std::string expected = wire_encode(h);
  REQUIRE(head.size() == expected.size());
  CHECK(std::string(static_cast<const char*>(head.data()), head.size()) == expected);
  CHECK(wire_decode<Header>(head.bytes(), "header").key == 123456789);
}
