#include "common/transport/zmq/zmq_reply_budget.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "common/base/errors.h"

namespace pstrain {

namespace {

struct PeerAccount {
  std::atomic<std::int64_t> bytes{0};
};

// One queued message's header frame and what it is counted against.
struct Ticket {
  Buffer head;
  std::int64_t bytes = 0;
  std::shared_ptr<PeerAccount> peer;
  std::shared_ptr<ReplyBudget::State> state;  // alive while the frame is
  Ticket* next_free = nullptr;
};

constexpr std::size_t kTicketsPerBlock = 1024;

std::string mib(std::int64_t bytes) {
  const std::int64_t tenths = bytes * 10 / (std::int64_t{1} << 20);
  return std::to_string(tenths / 10) + "." + std::to_string(tenths % 10) + " MiB";
}

}  // namespace

struct ReplyBudget::State {
  // The pool (any thread, under the mutex).
  std::mutex mutex;
  Ticket* free_list = nullptr;
  std::vector<std::unique_ptr<Ticket[]>> blocks;
  std::atomic<std::int64_t> total{0};
  // The listener's thread only.
  MemoryLimits limits;
  std::map<std::string, std::shared_ptr<PeerAccount>> peers;
  std::optional<std::set<std::string>> members;
  std::int64_t shed = 0;
  std::int64_t peak = 0;
  std::uint64_t admitted = 0;

  Ticket* take_ticket() {
    std::lock_guard<std::mutex> lock(mutex);
    if (free_list == nullptr) {
      blocks.push_back(std::make_unique<Ticket[]>(kTicketsPerBlock));
      Ticket* block = blocks.back().get();
      for (std::size_t i = 0; i < kTicketsPerBlock; ++i) {
        block[i].next_free = free_list;
        free_list = &block[i];
      }
    }
    Ticket* t = free_list;
    free_list = t->next_free;
    return t;
  }

  void give_back(Ticket* t) {
    std::lock_guard<std::mutex> lock(mutex);
    t->next_free = free_list;
    free_list = t;
  }

  PeerAccount& account(const PeerId& peer) {
    if (++admitted % 4096 == 0) {  // forget idle connections (only the map holds them)
      std::erase_if(peers, [](const auto& e) { return e.second.use_count() == 1 && e.second->bytes.load() == 0; });
    }
    std::shared_ptr<PeerAccount>& a = peers[peer.bytes()];
    if (!a) a = std::make_shared<PeerAccount>();
    return *a;
  }

  std::int64_t busy_connections() const {
    std::int64_t n = 0;
    for (const auto& [id, a] : peers) n += a->bytes.load(std::memory_order_relaxed) > 0 ? 1 : 0;
    return n;
  }

  // Empty when `bytes` more for `peer` (holding `mine`) may go, else why not.
  std::string refusal(const PeerId& peer, std::int64_t mine, std::int64_t bytes) const {
    const bool stranger = members && members->count(peer.bytes()) == 0;
    if (stranger && limits.stranger_bytes > 0 && mine + bytes > limits.stranger_bytes) {
      return peer.name() + " is not one of this node's workers and already holds " + std::to_string(mine) +
             " bytes of unsent replies (at most " + std::to_string(limits.stranger_bytes) +
             " for such a connection): it does not read";
    }
    const std::int64_t budget = limits.budget_bytes;
    const std::int64_t unsent = total.load(std::memory_order_relaxed);
    if (budget <= 0 || unsent + bytes <= budget) return {};
    const std::int64_t connections = busy_connections() + (mine == 0 ? 1 : 0);
    const std::int64_t share = budget / std::max<std::int64_t>(connections, 1);
    if (unsent + bytes <= 2 * budget && mine + bytes <= share) return {};
    return "the node's memory budget for unsent replies (" + mib(budget) +
           ", cluster.memory_budget_mb) is full: " + mib(unsent) + " unsent, " + mib(mine) + " of it to " +
           peer.name() + (mine + bytes > share ? ", over its share of " + mib(share) + ": it reads too slowly" : "");
  }
};

namespace {

// ZeroMQ's free callback for a ticketed header frame (its I/O thread).
void release_ticket(void* /*data*/, void* hint) {
  auto* t = static_cast<Ticket*>(hint);
  std::shared_ptr<PeerAccount> peer = std::move(t->peer);
  std::shared_ptr<ReplyBudget::State> state = std::move(t->state);
  peer->bytes.fetch_sub(t->bytes, std::memory_order_relaxed);
  state->total.fetch_sub(t->bytes, std::memory_order_relaxed);
  t->head = Buffer();
  state->give_back(t);
}  // `state` may go here, with the block holding `t`: nothing touches t after give_back

}  // namespace

ReplyBudget::ReplyBudget() : state_(std::make_shared<State>()) {}
ReplyBudget::~ReplyBudget() = default;

void ReplyBudget::set_limits(const MemoryLimits& limits) { state_->limits = limits; }
const MemoryLimits& ReplyBudget::limits() const { return state_->limits; }

void ReplyBudget::set_members(const std::vector<PeerId>& members) {
  std::set<std::string> ids;
  for (const PeerId& p : members) ids.insert(p.bytes());
  state_->members = std::move(ids);
}

zmq::message_t ReplyBudget::admit(const PeerId& to, Buffer head, std::int64_t message_bytes, const Header& header) {
  State& s = *state_;
  PeerAccount& peer = s.account(to);
  const std::int64_t bytes = message_bytes + kMessageOverhead;
  const std::int64_t mine = peer.bytes.load(std::memory_order_relaxed);
  if (s.limits.budget_bytes > 0 || s.limits.stranger_bytes > 0) {
    const std::string why = s.refusal(to, mine, bytes);
    if (!why.empty()) {
      ++s.shed;
      throw TransportError("reply " + std::string(to_string(header.type)) + " (key " + std::to_string(header.key) +
                           ") not sent: " + why);
    }
  }
  Ticket* t = s.take_ticket();
  t->head = std::move(head);
  t->bytes = bytes;
  t->peer = s.peers[to.bytes()];
  t->state = state_;
  peer.bytes.fetch_add(bytes, std::memory_order_relaxed);
  s.peak = std::max(s.peak, s.total.fetch_add(bytes, std::memory_order_relaxed) + bytes);
  return zmq::message_t(const_cast<void*>(t->head.data()), t->head.size(), &release_ticket, t);
}

std::int64_t ReplyBudget::unsent_bytes() const { return state_->total.load(std::memory_order_relaxed); }

std::int64_t ReplyBudget::unsent_bytes(const PeerId& peer) const {
  const auto it = state_->peers.find(peer.bytes());
  return it == state_->peers.end() ? 0 : it->second->bytes.load(std::memory_order_relaxed);
}

std::int64_t ReplyBudget::shed_messages() const { return state_->shed; }

bool ReplyBudget::take_drained() {
  State& s = *state_;
  const std::int64_t now = s.total.load(std::memory_order_relaxed);
  if (s.peak < kGiveBackPeak || now > s.peak / 8) return false;
  s.peak = now;
  return true;
}

bool BudgetedListener::give_back_memory() { return budget_.take_drained() && give_back_freed_memory(); }

bool give_back_freed_memory() {
#if defined(__GLIBC__)
  malloc_trim(0);
  return true;
#else
  return false;
#endif
}

}  // namespace pstrain
