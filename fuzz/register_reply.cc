// libFuzzer target: a kRegisterReply body as a server or worker reads it:
// decode, the layout check, and the shard map built from it.
#include "common/base/errors.h"
#include "common/wire/protocol.h"
#include "common/math/shard_map.h"
#include "common/wire/wire_archive.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  pstrain::fuzz::Input in(data, size);
  const std::int64_t partition = 4 * (1 + in.byte());
  try {
    const auto reply = pstrain::wire_decode<pstrain::RegisterReply>(in.rest(), "register reply");
    reply.layout.validate();
    if (reply.num_servers >= 1 && reply.num_servers <= 64 && reply.layout.total_elems() <= (std::int64_t{1} << 16)) {
      const pstrain::ShardMap map(reply.layout, reply.num_servers, partition);
      for (int s = 0; s < map.num_servers(); ++s) (void)map.chunks_of(s).size();
    }
  } catch (const pstrain::Error&) {
  }
  return 0;
}
