// Pulled weights without the worker's copy (issue 25): over shm a pull
// reply's float32 body lies in the server's arena, which the worker maps
// read-only; instead of copying a large chunk into the model's flat
// parameters, its whole pages are mapped there (Transport::map_shared_pages:
// the same pages at a second address), and only the partial pages at the
// chunk's two ends are copied. The server places each large chunk's weights
// at the chunk's flat offset modulo the page (server/shard_store.h,
// kPlacedWeightsBytes), so the pages line up.
//
// Holds. Mapped weights are the server's memory: they stay unchanged only
// while the reply that delivered them is held (the server updates out of
// place meanwhile). So the reply is kept per chunk (`take`) and let go when
// the worker pushes that chunk (`release`, before the push is sent: the
// server then finds the reply handed back and updates in place), or when
// the chunk's next reply replaces it. Between a chunk's push and its next
// reply its range in the model is not to be read (it shows the server's
// update as it is made); in the steady state of sync the next reply lies
// in the same pages and nothing is mapped again.
//
// Writers. Anything else that writes a mapped range puts private memory back
// first: `make_private(key)` (an inline or bfloat16 reply, a reply the
// transport cannot map, a pull into this buffer of another kind); `clear`
// copies every mapped range into private pages (the content as it is) and
// forgets the buffer: the model is ordinary memory again (the end of a
// worker's loop). The buffer must be page aligned and its owner must unmap
// it whole when it frees it (nn::CpuBackend's large buffers), or call
// clear() first.
// Not thread-safe: the KV client's owner thread uses it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/math/shard_map.h"
#include "common/transport/transport.h"
#include "common/wire/buffer.h"

namespace pstrain {

class PullPages {
 public:
  // Chunks whose whole pages inside them are fewer than this are copied.
  static constexpr std::size_t kMinPages = 16;

  PullPages(Transport& transport, const ShardMap& map);
  PullPages(const PullPages&) = delete;
  PullPages& operator=(const PullPages&) = delete;

  // The flat buffer (map.total_elems() floats) whose pulled chunks may be
  // mapped; empty: none. A buffer set before is cleared first (clear()).
  // ConfigError when it is not page aligned or not of the map's size.
  void set_buffer(std::span<float> flat);
  // Whether `dest` is chunk `key`'s place in the buffer.
  bool covers(std::int64_t key, const float* dest) const;
  // A float32 pull reply of chunk `key` (its payload the chunk's bytes) into
  // the buffer: maps its whole pages (nothing to do when the same pages are
  // mapped there already), copies the two partial ends and keeps the payload
  // (the hold). False, having changed nothing but making the range private
  // when it was mapped: the caller copies.
  bool take(std::int64_t key, Buffer& payload);
  // Before anything else writes chunk `key`'s range: private pages back
  // where it was mapped (zeroed: the caller writes the whole chunk), the hold dropped.
  void make_private(std::int64_t key);
  // The worker pushes chunk `key`: its hold goes, its pages stay mapped.
  void release(std::int64_t key);
  // Every mapped range copied into private pages as it is now, the holds
  // dropped, the buffer forgotten. Throws Error when the system refuses memory.
  void clear();

  bool mapped(std::int64_t key) const { return state_[static_cast<std::size_t>(key)].source != 0; }
  bool held(std::int64_t key) const { return state_[static_cast<std::size_t>(key)].hold.data() != nullptr; }
  // Chunks mapped anew (not the same pages as before) and replies taken, since construction.
  std::int64_t maps() const { return maps_; }
  std::int64_t taken() const { return taken_; }

 private:
  struct ChunkPages {
    std::byte* begin = nullptr;  // the whole pages inside the chunk's range: [begin, end)
    std::byte* end = nullptr;
    std::uint64_t source = 0;          // the memory mapped there (Transport::shared_pages_of), 0: private
    const std::byte* source_at = nullptr;  // and the address it was mapped from
    Buffer hold;                       // the reply that keeps those pages unchanged
  };

  Transport& transport_;
  const ShardMap& map_;
  std::span<float> flat_;
  std::vector<ChunkPages> state_;
  std::int64_t maps_ = 0;
  std::int64_t taken_ = 0;
};

}  // namespace pstrain
