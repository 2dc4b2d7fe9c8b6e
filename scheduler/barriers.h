// The scheduler's barriers: which worker has arrived at which barrier, and
// when one is released. Pure: no sockets, no clock; the membership (who is
// in the job now) is passed in at each release.
//
// Barriers are numbered by the workers (Header::key, one number per barrier
// a worker takes) and named by their first arrival (a checkpoint's name).
// A barrier waits for every worker still in the job and not done (a worker
// that is done has passed every barrier); an arrival counts while its worker
// is not dropped. Two kinds of arrival:
//  - an ordinary one, counted towards the barrier of its number;
//  - a rejoined worker's first (rejoin(): its numbers start at the others'
//    next). When it names the barrier the others released last and that
//    number is not open, it is the checkpoint the others had finished before
//    it rejoined (it joined at that very step, ps_rejoin.h): it passes at once
//    and its later numbers are one ahead of the others' (its shift).
// Owned by the scheduler's thread (scheduler/scheduler.h).
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace pstrain {

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
  // rank ascending). O(open barriers) until one has `waited_for` arrivals.
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
  // Workers arrived at open barrier `seq` (empty when it is not open).
  std::vector<int> arrived(std::int64_t seq) const;

 private:
  struct Numbering {
    std::int64_t shift = 0;  // seq = key + shift (a rejoiner's run behind the others')
    bool realign = false;    // a rejoiner whose first barrier is still to come
  };
  std::map<std::int64_t, std::vector<int>> open_;     // sequence -> worker ranks arrived
  std::map<std::int64_t, std::string> names_;         // sequence -> name (the first arrival's)
  std::map<int, Numbering> numbering_;                // by worker rank; absent = no shift
  std::int64_t next_seq_ = 0;
  std::string last_released_;
};

}  // namespace pstrain
