#include "worker/client/pull_pages.h"

#include <cstring>
#include <string>

#include <sys/mman.h>
#include <unistd.h>

#include "common/base/errors.h"

namespace pstrain {
namespace {

std::uintptr_t page_bytes() {
  static const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  return page;
}

std::byte* round_up(std::byte* p) {
  const std::uintptr_t page = page_bytes();
  return reinterpret_cast<std::byte*>((reinterpret_cast<std::uintptr_t>(p) + page - 1) / page * page);
}

std::byte* round_down(std::byte* p) {
  const std::uintptr_t page = page_bytes();
  return reinterpret_cast<std::byte*>(reinterpret_cast<std::uintptr_t>(p) / page * page);
}

// Fresh private pages over [begin, end): zeroed (the caller writes them).
void map_private(std::byte* begin, std::byte* end) {
  void* got = ::mmap(begin, static_cast<std::size_t>(end - begin), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  if (got != begin) throw Error("pull pages: cannot map private memory back over the model's weights");
}

}  // namespace

PullPages::PullPages(Transport& transport, const ShardMap& map)
    : transport_(transport), map_(map), state_(map.chunks().size()) {}

void PullPages::set_buffer(std::span<float> flat) {
  clear();
  if (flat.empty()) return;
  if (flat.size() != static_cast<std::size_t>(map_.total_elems())) {
    throw ConfigError("pull pages: a buffer of " + std::to_string(flat.size()) + " floats for a shard map of " +
                      std::to_string(map_.total_elems()));
  }
  if (reinterpret_cast<std::uintptr_t>(flat.data()) % page_bytes() != 0) {
    throw ConfigError("pull pages: the buffer does not start on a page");
  }
  flat_ = flat;
  for (const Chunk& c : map_.chunks()) {
    auto* first = reinterpret_cast<std::byte*>(flat.data() + c.offset);
    auto* last = reinterpret_cast<std::byte*>(flat.data() + c.offset + c.num_elems);
    ChunkPages& s = state_[static_cast<std::size_t>(c.id)];
    s.begin = round_up(first);
    s.end = round_down(last);
    if (s.end < s.begin + kMinPages * page_bytes()) s.begin = s.end = nullptr;  // too small: copied
  }
}

bool PullPages::covers(std::int64_t key, const float* dest) const {
  return !flat_.empty() && dest == flat_.data() + map_.chunk(key).offset;
}

bool PullPages::take(std::int64_t key, Buffer& payload) {
  ChunkPages& s = state_[static_cast<std::size_t>(key)];
  const Chunk& c = map_.chunk(key);
  const auto bytes = static_cast<std::size_t>(c.num_elems) * sizeof(float);
  const std::uint64_t source = s.begin == nullptr ? 0 : transport_.shared_pages_of(payload);
  if (source == 0 || payload.size() != bytes) {
    make_private(key);
    return false;
  }
  auto* dest = reinterpret_cast<std::byte*>(flat_.data() + c.offset);
  const auto* from = static_cast<const std::byte*>(payload.data());
  const auto head = static_cast<std::size_t>(s.begin - dest);
  const auto whole = static_cast<std::size_t>(s.end - s.begin);
  if (source != s.source || from + head != s.source_at) {
    if (reinterpret_cast<std::uintptr_t>(from + head) % page_bytes() != 0) {  // not placed to line up: copied
      make_private(key);
      return false;
    }
    if (!transport_.map_shared_pages(payload, head, s.begin, whole)) {
      s.source = 0;  // whatever was there may be gone: private pages back, then the caller copies
      s.source_at = nullptr;
      map_private(s.begin, s.end);
      s.hold = Buffer();
      return false;
    }
    s.source = source;
    s.source_at = from + head;
    ++maps_;
  }
  std::memcpy(dest, from, head);
  std::memcpy(s.end, from + head + whole, bytes - head - whole);
  s.hold = std::move(payload);  // the slot goes back to the server only now: the pages stay as they are
  ++taken_;
  return true;
}

void PullPages::make_private(std::int64_t key) {
  ChunkPages& s = state_[static_cast<std::size_t>(key)];
  s.hold = Buffer();
  if (s.source == 0) return;
  s.source = 0;
  s.source_at = nullptr;
  map_private(s.begin, s.end);
}

void PullPages::release(std::int64_t key) { state_[static_cast<std::size_t>(key)].hold = Buffer(); }

void PullPages::clear() {
  for (ChunkPages& s : state_) {
    if (s.source != 0) {
      // A private copy of what the range shows, moved over it in one step.
      const auto n = static_cast<std::size_t>(s.end - s.begin);
      void* copy = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (copy == MAP_FAILED) throw Error("pull pages: no memory for a private copy of the model's weights");
      std::memcpy(copy, s.begin, n);
      if (::mremap(copy, n, n, MREMAP_MAYMOVE | MREMAP_FIXED, s.begin) != s.begin) {
        ::munmap(copy, n);
        throw Error("pull pages: cannot move a private copy over the model's weights");
      }
    }
    s = ChunkPages{};
  }
  flat_ = {};
}

}  // namespace pstrain
