#include "common/transport/shm/shm_transport.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

#include "common/base/errors.h"
#include "common/transport/shm/shm_layer.h"
#include "common/transport/zmq/zmq_curve.h"

namespace pstrain {

ShmTransportOptions shm_options_for(std::int64_t partition_bytes) {
  ShmTransportOptions o;
  constexpr std::size_t kMinSlot = std::size_t{64} << 10, kMaxSlot = std::size_t{256} << 20;
  constexpr std::size_t kSideBytes = std::size_t{64} << 20;
  const std::size_t wanted = partition_bytes > 0 ? static_cast<std::size_t>(partition_bytes) : kMinSlot;
  o.segment.slot_bytes = std::clamp(wanted, kMinSlot, kMaxSlot);
  o.segment.slots_per_side =
      static_cast<std::uint32_t>(std::clamp<std::size_t>(kSideBytes / o.segment.slot_bytes, 8, 256));
  o.segment.populate = false;
  o.segment.name = "conn";
  return o;
}

std::unique_ptr<Listener> ShmTransport::listen(const std::string& address, EndpointOptions options) {
  return shm_detail::make_shm_listener(*this, ctx_, address, std::move(options));
}

std::unique_ptr<Connection> ShmTransport::connect(const std::string& address, EndpointOptions options) {
  return shm_detail::make_shm_connection(*this, ctx_, address, std::move(options));
}

std::vector<bool> ShmTransport::wait_any(std::span<Endpoint* const> endpoints, std::chrono::milliseconds timeout) {
  return poll_zmq_endpoints(endpoints, timeout);
}

std::unique_ptr<ZapHandler> ShmTransport::authenticate(const SecurityContext* security, Logger& log) {
  return start_zap_handler(ctx_, security, log);
}

// The arenas of one transport and the blocks given out of them.
class ShmArenaPool : public std::enable_shared_from_this<ShmArenaPool> {
 public:
  static constexpr std::size_t kMaxArenas = shm_detail::kMaxArenasPerPeer;  // a listener maps at most this many per peer
  static constexpr std::size_t kFirstArenaBytes = std::size_t{64} << 20;

  // Zeroed floats, or nothing when the pool is used up or the system refuses.
  std::optional<SendFloats> allocate(std::size_t count) {
    const std::size_t bytes = (std::max<std::size_t>(count, 1) * sizeof(float) + 4095) / 4096 * 4096;
    std::byte* at = nullptr;
    bool reused = false;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      auto given = free_.find(bytes);
      if (given != free_.end() && !given->second.empty()) {
        at = given->second.back();
        given->second.pop_back();
        reused = true;
      } else if (!arenas_.empty() && arenas_.back()->size() - used_ >= bytes) {
        at = arenas_.back()->data() + used_;  // never used: zero
        used_ += bytes;
      } else if (arenas_.size() < kMaxArenas) {
        const std::size_t size = std::max(bytes, kFirstArenaBytes << arenas_.size());
        try {
          arenas_.push_back(std::shared_ptr<ShmArena>(ShmArena::create(size)));
        } catch (const Error&) {
          return std::nullopt;
        }
        at = arenas_.back()->data();
        used_ = bytes;
      } else {
        return std::nullopt;
      }
    }
    if (reused) std::memset(at, 0, bytes);  // outside the lock: blocks can be big
    SendFloats out;
    out.values = std::span<float>(reinterpret_cast<float*>(at), count);
    out.owner = std::shared_ptr<void>(at, [pool = shared_from_this(), bytes](void* p) {
      pool->give_back(static_cast<std::byte*>(p), bytes);
    });
    return out;
  }

  std::shared_ptr<ShmArena> holding(const void* data, std::size_t bytes) const {
    const std::lock_guard<std::mutex> lock(mutex_);
    for (const std::shared_ptr<ShmArena>& arena : arenas_) {
      if (arena->holds(data, bytes)) return arena;
    }
    return nullptr;
  }

 private:
  void give_back(std::byte* at, std::size_t bytes) {
    const std::lock_guard<std::mutex> lock(mutex_);
    free_[bytes].push_back(at);
  }

  mutable std::mutex mutex_;
  std::vector<std::shared_ptr<ShmArena>> arenas_;
  std::size_t used_ = 0;                                 // bytes given out of arenas_.back() so far
  std::map<std::size_t, std::vector<std::byte*>> free_;  // blocks given back, by size
};

ShmTransport::ShmTransport(zmq::context_t& ctx, ShmTransportOptions options)
    : ctx_(ctx), options_(std::move(options)), boot_id_(shm_detail::read_boot_id()),
      pool_(std::make_shared<ShmArenaPool>()) {}

// An owned context ends first (zmq_ctx_term waits for the frames still queued,
// up to each socket's linger), then the arena pool: a queued frame may point
// into an arena, and the I/O thread must not read an unmapped one.
ShmTransport::~ShmTransport() {
  if (owned_) owned_->close();
}

ShmTransport::ShmTransport(ShmTransportOptions options)
    : owned_(std::make_unique<zmq::context_t>()), ctx_(*owned_), options_(std::move(options)),
      boot_id_(shm_detail::read_boot_id()), pool_(std::make_shared<ShmArenaPool>()) {}

SendFloats ShmTransport::allocate_send_floats(std::size_t count) {
  if (std::optional<SendFloats> block = pool_->allocate(count)) return std::move(*block);
  return Transport::allocate_send_floats(count);  // ordinary memory, sent through slots
}

namespace {

shm_detail::HeldArenaReply* held_arena_reply(Buffer& frame) {
  auto* held = frame.owner_if<std::unique_ptr<shm_detail::HeldArenaReply>>();
  return held == nullptr || *held == nullptr || (*held)->arena == nullptr ? nullptr : held->get();
}

}  // namespace

std::uint64_t ShmTransport::shared_pages_of(Buffer& frame) const {
  const shm_detail::HeldArenaReply* held = held_arena_reply(frame);
  return held == nullptr ? 0 : held->arena->id();
}

bool ShmTransport::map_shared_pages(Buffer& frame, std::size_t offset, void* dest, std::size_t bytes) {
  const shm_detail::HeldArenaReply* held = held_arena_reply(frame);
  if (held == nullptr || bytes == 0 || offset + bytes > frame.size()) return false;
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto* src = static_cast<const std::byte*>(frame.data()) + offset;
  const auto at = reinterpret_cast<std::uintptr_t>(src), to = reinterpret_cast<std::uintptr_t>(dest);
  if (at % page != 0 || to % page != 0 || bytes % page != 0 || !held->arena->holds(src, bytes)) return false;
  // Old size 0 on a shared mapping: a second mapping of the same pages (read-only, as the arena's).
  void* got = ::mremap(const_cast<std::byte*>(src), 0, bytes, MREMAP_MAYMOVE | MREMAP_FIXED, dest);
  return got == dest;
}

std::shared_ptr<ShmArena> ShmTransport::arena_holding(const void* data, std::size_t bytes) const {
  return pool_->holding(data, bytes);
}

ShmTransport::Stats ShmTransport::stats() const {
  Stats s;
  s.shm_bodies = counters_.shm_bodies.load();
  s.inline_bodies = counters_.inline_bodies.load();
  s.no_free_slot = counters_.no_free_slot.load();
  s.accepted = counters_.accepted.load();
  s.refused = counters_.refused.load();
  s.orphan_descriptors = counters_.orphan_descriptors.load();
  s.meddled = counters_.meddled.load();
  s.noes_heard = counters_.noes_heard.load();
  s.arena_bodies = counters_.arena_bodies.load();
  s.arenas_accepted = counters_.arenas_accepted.load();
  s.arenas_refused = counters_.arenas_refused.load();
  s.arena_bodies_read = counters_.arena_bodies_read.load();
  return s;
}

}  // namespace pstrain
