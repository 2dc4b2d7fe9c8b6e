#include "common/transport/zmq/zmq_reply_budget.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <atomic>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>

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
  bool stranger = false;  // counted in the strangers' pool too
  std::shared_ptr<ReplyBudget::State> state;  // alive while the frame is
  Ticket* next_free = nullptr;
};

constexpr std::size_t kTicketsPerBlock = 1024;
constexpr std::size_t kFirstSweep = 4096;  // peers' accounts kept before the first sweep of idle ones

std::string mib(std::int64_t bytes) {
  const std::int64_t tenths = bytes * 10 / (std::int64_t{1} << 20);
  return std::to_string(tenths / 10) + "." + std::to_string(tenths % 10) + " MiB";
}

}  // namespace

struct ReplyBudget::State {
  // The pool: the listener's thread takes tickets from its own free list and,
  // when that is empty, all those given back since (one exchange); any thread
  // gives one back with a compare-and-swap. No lock: a release to W peers
  // used to take a mutex W times against the W receiving threads giving
  // theirs back, and a contended mutex puts a thread to sleep.
  Ticket* free_list = nullptr;                // the listener's thread only
  std::atomic<Ticket*> returned{nullptr};     // given back, not yet taken again
  std::vector<std::unique_ptr<Ticket[]>> blocks;  // the listener's thread only
  std::atomic<std::int64_t> total{0};
  std::atomic<std::int64_t> strangers_total{0};  // the part of total queued to strangers
  std::atomic<std::int64_t> bound{0};            // unsent_bound(limits), for other threads
  // The listener's thread only.
  MemoryLimits limits;
  std::unordered_map<std::string, std::shared_ptr<PeerAccount>> peers;
  std::optional<std::unordered_set<std::string>> members;
  std::int64_t shed = 0;
  std::int64_t peak = 0;
  std::int64_t accounts_made = 0;
  std::size_t sweep_at = kFirstSweep;  // peers.size() at which idle accounts are forgotten

  Ticket* take_ticket() {
    if (free_list == nullptr) free_list = returned.exchange(nullptr, std::memory_order_acquire);
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

  // Any thread. Only the listener's thread takes from `returned`, and it takes
  // the whole list at once, so a ticket cannot leave and come back between
  // this load and the swap (no ABA).
  void give_back(Ticket* t) {
    t->next_free = returned.load(std::memory_order_relaxed);
    while (!returned.compare_exchange_weak(t->next_free, t, std::memory_order_release, std::memory_order_relaxed)) {
    }
  }

  // The peer's account, found once per send. Idle accounts (only the map holds
  // them, nothing unsent) are forgotten when the map has doubled since the
  // last sweep: a node whose peers stay (a barrier's 1,024 workers) keeps
  // their accounts, one whose peers come and go stays within twice its live ones.
  std::shared_ptr<PeerAccount>& account(const PeerId& peer) {
    if (peers.size() >= sweep_at) {
      std::erase_if(peers, [](const auto& e) { return e.second.use_count() == 1 && e.second->bytes.load() == 0; });
      sweep_at = std::max(kFirstSweep, 2 * peers.size());
    }
    std::shared_ptr<PeerAccount>& a = peers[peer.bytes()];
    if (!a) {
      a = std::make_shared<PeerAccount>();
      ++accounts_made;
    }
    return a;
  }

  bool is_stranger(const std::string& id) const { return members && members->count(id) == 0; }

  // Whom a budget covers: every connection (strangers without a pool of
  // their own), the members only, or the strangers only (their pool).
  enum class Kind { kAll, kMembers, kStrangers };

  // Connections of `kind` holding unsent replies.
  std::int64_t busy_connections(Kind kind) const {
    std::int64_t n = 0;
    for (const auto& [id, a] : peers) {
      if (a->bytes.load(std::memory_order_relaxed) == 0) continue;
      if (kind == Kind::kAll || (kind == Kind::kStrangers) == is_stranger(id)) ++n;
    }
    return n;
  }

  // Empty when `bytes` more for `peer` (holding `mine`; a `stranger` or not) may go, else why not.
  std::string refusal(const PeerId& peer, bool stranger, std::int64_t mine, std::int64_t bytes) const {
    if (stranger && limits.stranger_bytes > 0 && mine + bytes > limits.stranger_bytes) {
      return peer.name() + " is not one of this node's members and already holds " + std::to_string(mine) +
             " bytes of unsent replies (at most " + std::to_string(limits.stranger_bytes) +
             " for such a connection): it does not read";
    }
    const std::int64_t all = total.load(std::memory_order_relaxed);
    const std::int64_t strangers = strangers_total.load(std::memory_order_relaxed);
    if (limits.strangers_bytes <= 0) {
      return over_share(peer, mine, bytes, limits.budget_bytes, all, Kind::kAll,
                        "the node's memory budget for unsent replies (");
    }
    if (stranger) {
      return over_share(peer, mine, bytes, limits.strangers_bytes, strangers, Kind::kStrangers,
                        "the memory for unsent replies to connections that are not this node's members (");
    }
    return over_share(peer, mine, bytes, limits.budget_bytes, all - strangers, Kind::kMembers,
                      "the node's memory budget for unsent replies (");
  }

  // Within `budget`, holding `unsent` for connections of `kind`: a connection
  // under its share (budget / such connections busy) still gets its reply up
  // to twice the budget, a hard stop; the others are refused.
  std::string over_share(const PeerId& peer, std::int64_t mine, std::int64_t bytes, std::int64_t budget,
                         std::int64_t unsent, Kind kind, const char* what) const {
    if (budget <= 0 || unsent + bytes <= budget) return {};
    const std::int64_t connections = busy_connections(kind) + (mine == 0 ? 1 : 0);
    const std::int64_t share = budget / std::max<std::int64_t>(connections, 1);
    if (unsent + bytes <= 2 * budget && mine + bytes <= share) return {};
    return what + mib(budget) + ", cluster.memory_budget_mb) is full: " + mib(unsent) + " unsent, " + mib(mine) +
           " of it to " + peer.name() +
           (mine + bytes > share ? ", over its share of " + mib(share) + ": it reads too slowly" : "");
  }
};

namespace {

// ZeroMQ's free callback for a ticketed header frame (its I/O thread).
void release_ticket(void* /*data*/, void* hint) {
  auto* t = static_cast<Ticket*>(hint);
  std::shared_ptr<PeerAccount> peer = std::move(t->peer);
  std::shared_ptr<ReplyBudget::State> state = std::move(t->state);
  peer->bytes.fetch_sub(t->bytes, std::memory_order_relaxed);
  if (t->stranger) state->strangers_total.fetch_sub(t->bytes, std::memory_order_relaxed);
  state->total.fetch_sub(t->bytes, std::memory_order_relaxed);
  t->head = Buffer();
  state->give_back(t);
}  // `state` may go here, with the block holding `t`: nothing touches t after give_back

}  // namespace

ReplyBudget::ReplyBudget() : state_(std::make_shared<State>()) {}
ReplyBudget::~ReplyBudget() = default;

void ReplyBudget::set_limits(const MemoryLimits& limits) {
  state_->limits = limits;
  state_->bound.store(unsent_bound(limits), std::memory_order_relaxed);
}
const MemoryLimits& ReplyBudget::limits() const { return state_->limits; }

void ReplyBudget::set_members(const std::vector<PeerId>& members) {
  std::unordered_set<std::string> ids;
  for (const PeerId& p : members) ids.insert(p.bytes());
  state_->members = std::move(ids);
}

void ReplyBudget::add_member(const PeerId& member) {
  if (!state_->members) state_->members.emplace();
  state_->members->insert(member.bytes());
}

zmq::message_t ReplyBudget::admit(const PeerId& to, Buffer head, std::int64_t message_bytes, const Header& header) {
  State& s = *state_;
  std::shared_ptr<PeerAccount>& account = s.account(to);
  PeerAccount& peer = *account;
  const std::int64_t bytes = message_bytes + kMessageOverhead;
  const std::int64_t mine = peer.bytes.load(std::memory_order_relaxed);
  const bool stranger = s.is_stranger(to.bytes());
  if (s.limits.budget_bytes > 0 || s.limits.stranger_bytes > 0 || s.limits.strangers_bytes > 0) {
    const std::string why = s.refusal(to, stranger, mine, bytes);
    if (!why.empty()) {
      ++s.shed;
      throw TransportError("reply " + std::string(to_string(header.type)) + " (key " + std::to_string(header.key) +
                           ") not sent: " + why);
    }
  }
  Ticket* t = s.take_ticket();
  t->head = std::move(head);
  t->bytes = bytes;
  t->peer = account;
  t->stranger = stranger;
  t->state = state_;
  peer.bytes.fetch_add(bytes, std::memory_order_relaxed);
  if (t->stranger) s.strangers_total.fetch_add(bytes, std::memory_order_relaxed);
  s.peak = std::max(s.peak, s.total.fetch_add(bytes, std::memory_order_relaxed) + bytes);
  return zmq::message_t(const_cast<void*>(t->head.data()), t->head.size(), &release_ticket, t);
}

std::int64_t ReplyBudget::unsent_bytes() const { return state_->total.load(std::memory_order_relaxed); }
std::int64_t ReplyBudget::strangers_unsent_bytes() const {
  return state_->strangers_total.load(std::memory_order_relaxed);
}
std::int64_t ReplyBudget::unsent_limit() const { return state_->bound.load(std::memory_order_relaxed); }

std::int64_t ReplyBudget::unsent_bytes(const PeerId& peer) const {
  const auto it = state_->peers.find(peer.bytes());
  return it == state_->peers.end() ? 0 : it->second->bytes.load(std::memory_order_relaxed);
}

std::int64_t ReplyBudget::shed_messages() const { return state_->shed; }
std::int64_t ReplyBudget::accounts_made() const { return state_->accounts_made; }
std::int64_t ReplyBudget::tickets_made() const {
  return static_cast<std::int64_t>(state_->blocks.size() * kTicketsPerBlock);
}

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
