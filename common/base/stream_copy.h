// Copies with streaming (non-temporal) stores: the destination's lines are
// written without being read first (no read-for-ownership) and without
// evicting the writer's caches. For memory written now and read much later
// or by another core after more data than the caches hold has gone by (a
// model's weights too big for the last-level cache); for data read again
// soon, a plain memcpy is faster.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pstrain {

// Above this many bytes of a model, a worker's pull writes the weights with
// streaming stores (worker/client/kv_client.h): half the last-level cache of
// the 2-core VMs this is measured on (32 MiB; a VM's sysconf can report the
// host's). Below it they are read again from the caches, where plain stores
// win. (The servers' update writes new weights with plain stores: a worker
// reads them from the caches shortly after; streaming them measured no gain.)
inline constexpr std::int64_t kStreamWeightsAboveBytes = std::int64_t{16} << 20;

// `n` bytes, any alignment (the head up to a 16-byte boundary and the tail
// are copied plainly); the stores are ordered (sfence) before it returns.
// Plain memcpy on other architectures than x86-64.
void stream_copy(void* destination, const void* source, std::size_t n);

}  // namespace pstrain
