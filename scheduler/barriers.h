// The scheduler's barriers: which worker has arrived at which barrier, and
// when one is released. Pure: no sockets, no clock; the membership (who is
// in the job now) is passed in at each release.
//
// Barriers are numbered by the workers (Header::key, one number per barrier
// a worker takes) and named by their first arrival (a checkpoint's name).
// A barrier waits for every worker still in the job and not done (a worker
// that is done has passed every barrier); an arrival counts while its worker
// is neither dropped nor done. Two kinds of arrival:
//  - an ordinary one, counted towards the barrier of its number;
//  - a rejoined worker's first (rejoin(): its numbers start at the others'
//    next). When it names the barrier the others released last and that
//    number is not open, it is the checkpoint the others had finished before
//    it rejoined (it joined at that very step, ps_rejoin.h): it passes at once
//    and its later numbers are one ahead of the others' (its shift).
// A done (done()) ends a worker's part of the job only once it has passed the
// job's last barrier (kFinalBarrier, common/wire/barrier_names.h). A done
// before that is an early one: the worker left with barriers still ahead of
// it, so every barrier it has not entered can no longer complete with it.
// stranded() names such a barrier as soon as a worker waits at it, and the
// scheduler treats the early done as that worker's failure (its failure
// policy: the job ends naming it, or the worker is dropped and the barrier
// completes without it).
// Owned by the scheduler's thread (scheduler/scheduler.h).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

namespace pstrain {

// N of a barrier named "checkpoint N"; -1 for any other name.
std::int64_t checkpoint_step_of(const std::string& name);

class Barriers {
 public:
  enum class Arrival {
    kEntered,  // counted; release() says when the barrier is complete
    kPassed,   // a rejoiner's barrier the others had finished: answer it at once
  };
  // Worker `rank` arrives at its barrier `key` (its own numbering), named
  // `name` (may be empty). Throws ProtocolError when it entered that barrier
  // already.
  Arrival arrive(int rank, std::int64_t key, const std::string& name);
  // Releases, in order, every open barrier reached by `waited_for` workers:
  // arrivals count for the ranks in `in_job` (the workers not dropped, by
  // rank ascending) that have not said done (a done worker is not waited for).
  // O(open barriers) until one has `waited_for` arrivals.
  // Returns the released barriers' numbers (the job's numbering: key_for
  // turns one into a worker's).
  std::vector<std::int64_t> release(std::span<const int> in_job, int waited_for);
  // Barrier `seq` in worker `rank`'s own numbering.
  std::int64_t key_for(int rank, std::int64_t seq) const;
  // A new process took back worker `rank`: its numbers start at the others'
  // next (next_seq()) and its first barrier is to be realigned; the failed
  // process's arrivals at open barriers no longer count. Returns the names of
  // the open barriers it had entered, in order.
  std::vector<std::string> rejoin(int rank);
  // One past the highest barrier released: a rejoiner's next.
  std::int64_t next_seq() const { return next_seq_; }
  // The name of the barrier released last ("" before the first).
  const std::string& last_released() const { return last_released_; }
  // The highest step S of a barrier "checkpoint S" released so far (0: none;
  // the largest int64 once the final barrier was: every one is passed). A
  // rejoiner entering at a checkpoint's step writes its part only below it
  // (worker/train/ps_rejoin.h).
  std::int64_t checkpoint_released() const { return checkpoint_released_; }
  // Workers arrived at open barrier `seq` (empty when it is not open).
  std::vector<int> arrived(std::int64_t seq) const;
  // The name of open barrier `seq` ("" when it is not open).
  std::string name_of(std::int64_t seq) const {
    const auto it = names_.find(seq);
    return it == names_.end() ? std::string() : it->second;
  }

  // Worker `rank` said done: the end of its part of the job when it has
  // passed the final barrier (finished()), else an early done.
  void done(int rank);
  // Whether worker `rank` has passed the final barrier (entered it and seen
  // it released, or passed it as a rejoiner); a rejoin clears it.
  bool finished(int rank) const { return finished_.count(rank) != 0; }
  // Whether worker `rank` said done before it passed the final barrier.
  bool done_early(int rank) const { return early_done_.count(rank) != 0; }
  // An open barrier that can no longer complete: a worker in the job that
  // said done early (`rank`) never entered it, while `waiting` (workers in
  // the job, not done) wait there.
  struct Stranded {
    int rank = -1;
    std::string barrier;        // its name
    std::vector<int> waiting;   // ascending
  };
  // The first such barrier (lowest number; the lowest rank that strands it),
  // among the workers in `in_job` (not dropped, by rank ascending); nullopt
  // when none is. A barrier nobody in the job waits at yet strands nobody.
  // O(1) while no worker has said done early (the scheduler asks at every
  // arrival); else O(arrivals x log workers) per open barrier.
  std::optional<Stranded> stranded(std::span<const int> in_job) const;

 private:
  struct Numbering {
    std::int64_t shift = 0;  // seq = key + shift (a rejoiner's run behind the others')
    bool realign = false;    // a rejoiner whose first barrier is still to come
  };
  struct Open {
    std::vector<int> arrived;  // worker ranks, in order of arrival
    std::vector<bool> entered;  // by rank: whether in `arrived` (O(1) per arrival, not a scan)
  };
  std::map<std::int64_t, Open> open_;           // sequence -> its arrivals
  std::map<std::int64_t, std::string> names_;   // sequence -> name (the first arrival's)
  // By worker rank, only the ranks taken back (rejoin()): absent = no shift, so that key_for,
  // called for every worker at each release, looks up an empty or tiny map.
  std::map<int, Numbering> numbering_;
  std::int64_t next_seq_ = 0;
  std::string last_released_;
  std::int64_t checkpoint_released_ = 0;
  std::set<int> done_;        // said done (not waited for; their arrivals do not count)
  std::set<int> finished_;    // passed the final barrier
  std::set<int> early_done_;  // said done before passing it
};

}  // namespace pstrain
