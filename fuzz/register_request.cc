// libFuzzer target: a kRegister body as the scheduler reads it: decode, the
// layout check it makes for a worker, and the shard map every node derives
// from that layout (the config values reached from the wire).
#include "common/base/errors.h"
#include "common/wire/protocol.h"
#include "common/math/shard_map.h"
#include "common/wire/wire_archive.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  pstrain::fuzz::Input in(data, size);
  const int servers = 1 + in.byte() % 8;
  const std::int64_t partition = 4 * (1 + in.byte());
  try {
    const auto req = pstrain::wire_decode<pstrain::RegisterRequest>(in.rest(), "register body");
    req.layout.validate();
    // Chunks are bounded by elements / partition; keep each run small.
    if (req.layout.total_elems() <= (std::int64_t{1} << 16)) {
      const pstrain::ShardMap map(req.layout, servers, partition);
      (void)map.chunks().size();
    }
  } catch (const pstrain::Error&) {
  }
  return 0;
}
