// libFuzzer target: a store body (kStoreSet / kStoreGet / kStoreReply) as the
// scheduler and its clients read it: decode, then the size checks.
#include "common/base/errors.h"
#include "common/wire/protocol.h"
#include "common/wire/wire_archive.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  pstrain::fuzz::Input in(data, size);
  try {
    const auto entry = pstrain::wire_decode<pstrain::StoreEntry>(in.rest(), "store body");
    pstrain::validate_store_entry(entry, "store set");
  } catch (const pstrain::Error&) {
  }
  return 0;
}
