// The three consistency policies; the rules are in consistency.h.
#include "server/consistency.h"

#include <algorithm>
#include <limits>

#include "common/base/errors.h"
#include "server/request_error.h"

namespace pstrain {

std::string describe_push(std::int64_t key, int worker, std::int64_t step) {
  return "push of chunk " + std::to_string(key) + " from worker " + std::to_string(worker) + " at step " +
         std::to_string(step);
}

void reject_non_finite(const PushRequest& push, std::int64_t bad) {
  const std::int64_t first = update::first_non_finite(push.grad, push.num_elems);
  throw RequestError(Status::kRejected,
                     describe_push(push.key, push.worker, push.step) + ": gradient has " + std::to_string(bad) +
                         " non-finite values (first at element " + std::to_string(first) + "); not applied",
                     push.worker);
}

ConsistencyPolicy::ConsistencyPolicy(std::size_t num_chunks, int num_workers)
    : num_workers_(num_workers),
      last_step_(num_chunks, std::vector<std::int64_t>(static_cast<std::size_t>(num_workers), -1)),
      live_(static_cast<std::size_t>(num_workers), true),
      vacant_(static_cast<std::size_t>(num_workers), false),
      num_live_(num_workers) {}

void ConsistencyPolicy::check_worker(const PushRequest& push) const {
  if (push.worker < 0 || push.worker >= num_workers_) {
    throw RequestError(Status::kBadRequest, describe_push(push.key, push.worker, push.step) +
                                                ": worker rank outside [0, " + std::to_string(num_workers_) + ")");
  }
  if (!live_[static_cast<std::size_t>(push.worker)]) {
    throw RequestError(Status::kRejected, describe_push(push.key, push.worker, push.step) +
                                              (vacant_[static_cast<std::size_t>(push.worker)]
                                                   ? ": the worker's slot is vacant (not in the job); not applied"
                                                   : ": the worker was dropped from the job; not applied"));
  }
}

void ConsistencyPolicy::check_step(std::size_t chunk, const PushRequest& push) const {
  check_worker(push);
  const std::string what = describe_push(push.key, push.worker, push.step);
  const std::int64_t last = last_step_[chunk][static_cast<std::size_t>(push.worker)];
  if (push.step == last) throw RequestError(Status::kRejected, what + ": duplicate, already counted");
  if (push.step < last) {
    throw RequestError(Status::kRejected, what + ": stale, worker already pushed step " + std::to_string(last));
  }
}

void ConsistencyPolicy::mark_dropped(int worker) {
  if (worker < 0 || worker >= num_workers_) {
    throw Error("drop of worker " + std::to_string(worker) + ": outside [0, " + std::to_string(num_workers_) + ")");
  }
  if (live_[static_cast<std::size_t>(worker)]) {
    live_[static_cast<std::size_t>(worker)] = false;
    --num_live_;
  }
}

std::vector<std::int64_t> ConsistencyPolicy::rejoin_worker(int worker, std::span<const std::int64_t> versions) {
  if (worker < 0 || worker >= num_workers_) {
    throw Error("rejoin of worker " + std::to_string(worker) + ": outside [0, " + std::to_string(num_workers_) + ")");
  }
  if (live_[static_cast<std::size_t>(worker)]) {
    throw Error("rejoin of worker " + std::to_string(worker) + ": it was never dropped");
  }
  if (versions.size() != last_step_.size()) {
    throw Error("rejoin of worker " + std::to_string(worker) + ": " + std::to_string(versions.size()) +
                " versions for " + std::to_string(last_step_.size()) + " chunks");
  }
  std::vector<std::int64_t> start(last_step_.size());
  for (std::size_t c = 0; c < last_step_.size(); ++c) {
    start[c] = std::max(rejoin_floor(c, versions[c]), clock(c, worker));
  }
  live_[static_cast<std::size_t>(worker)] = true;
  ++num_live_;
  for (std::size_t c = 0; c < last_step_.size(); ++c) {
    last_step_[c][static_cast<std::size_t>(worker)] = start[c] - 1;
    on_rejoined(c, worker, start[c], versions[c]);
  }
  return start;
}

void ConsistencyPolicy::begin_catch_up() {
  catching_.assign(num_chunks(), true);
  num_catching_ = catching_.size();
}

void ConsistencyPolicy::end_catch_up(std::size_t chunk) {
  if (!catching_up(chunk)) return;
  catching_[chunk] = false;
  --num_catching_;
}

std::int64_t ConsistencyPolicy::min_live_clock(std::size_t chunk) const {
  std::int64_t lowest = std::numeric_limits<std::int64_t>::max();
  for (int w = 0; w < num_workers_; ++w) {
    if (live_[static_cast<std::size_t>(w)]) lowest = std::min(lowest, clock(chunk, w));
  }
  return lowest;
}

namespace {

// ---- sync ----------------------------------------------------------------------

class SyncPolicy final : public ConsistencyPolicy {
 public:
  SyncPolicy(const std::vector<std::int64_t>& chunk_elems, int num_workers, RangeRunner* ranges)
      : ConsistencyPolicy(chunk_elems.size(), num_workers), steps_(chunk_elems.size()), ranges_(ranges) {
    for (std::size_t i = 0; i < chunk_elems.size(); ++i) {
      Step& s = steps_[i];
      s.chunk = i;
      s.num_elems = static_cast<std::size_t>(chunk_elems[i]);
      s.arrived.assign(static_cast<std::size_t>(num_workers), false);
      s.early.resize(static_cast<std::size_t>(num_workers));
      s.early_lr.assign(static_cast<std::size_t>(num_workers), 0.0);
      s.has_early.assign(static_cast<std::size_t>(num_workers), false);
      s.skipped.assign(static_cast<std::size_t>(num_workers), false);
      s.excused.assign(static_cast<std::size_t>(num_workers), false);
      s.contributed.assign(static_cast<std::size_t>(num_workers), false);
    }
  }

  std::optional<Update> on_push(std::size_t chunk, std::int64_t version, const PushRequest& push) override {
    check_worker(push);  // a dropped worker is told so, not that its step is stale
    steps_[chunk].version = version;
    const std::string what = describe_push(push.key, push.worker, push.step);
    if (push.step < version) {
      throw RequestError(Status::kRejected, what + ": stale, the chunk is at version " + std::to_string(version));
    }
    if (push.step > version) {
      throw RequestError(Status::kRejected, what + ": ahead of the chunk's version " + std::to_string(version) +
                                                " (pull before pushing)");
    }
    check_step(chunk, push);
    Step& s = steps_[chunk];
    const auto w = static_cast<std::size_t>(push.worker);
    if (const std::optional<Fusion> f = fusion(s, push)) {  // the update's pass adds it (update_on_arrival)
      record_step(chunk, push);
      s.arrived[w] = true;  // a contributor of the step (step_contributors)
      if (f->early_rank >= 0) s.has_early[static_cast<std::size_t>(f->early_rank)] = false;
      const int skips = skips_of(s);
      const int late = late_starters(s, version);
      s.reset();
      end_catch_up(chunk);  // its first update after a rejoin
      return counted(fused_update(*f, push, skips), late);
    }
    // The gradient goes in first, checked in the same pass: a NaN or Inf
    // throws before anything is recorded or summed.
    if (!push.skip && push.worker == s.next) {
      add_checked(s, push);
    } else if (!push.skip) {  // an early arrival waits for the ranks before it
      s.early[w].resize(s.num_elems);
      if (const std::int64_t bad = copy_in(push.grad, s.early[w].data(), s.num_elems); bad != 0) {
        reject_non_finite(push, bad);
      }
      s.early_lr[w] = push.lr;
      s.has_early[w] = true;
    }
    record_step(chunk, push);
    s.arrived[w] = true;
    ++s.num_arrived;
    if (push.skip) s.skipped[w] = true;  // its rank is passed over when its turn comes
    return completed(chunk, advance(s));
  }

  std::optional<Update> update_on_arrival(std::size_t chunk, std::int64_t version,
                                         const PushRequest& push) const override {
    if (push.step != version) return std::nullopt;  // stale or ahead: on_push says which
    const Step& s = steps_[chunk];
    const std::optional<Fusion> f = fusion(s, push);
    if (!f) return std::nullopt;
    return counted(fused_update(*f, push, skips_of(s)), late_starters(s, version));
  }

  bool pull_ready(std::size_t, std::int64_t version, int, std::int64_t step) const override {
    return version >= step;
  }

  std::vector<std::optional<Update>> drop_worker(int worker) override {
    mark_dropped(worker);
    std::vector<std::optional<Update>> out(steps_.size());
    for (std::size_t i = 0; i < steps_.size(); ++i) {
      if (steps_[i].num_arrived > 0) out[i] = completed(i, advance(steps_[i]));
    }
    return out;
  }

  std::int64_t clock_gap(std::size_t, std::int64_t) const override { return 0; }

  std::optional<std::int64_t> staleness(std::int64_t, std::int64_t) const override { return std::nullopt; }

  std::vector<int> step_contributors(std::size_t chunk) const override {
    std::vector<int> out;
    const std::vector<bool>& contributed = steps_.at(chunk).contributed;
    for (std::size_t w = 0; w < contributed.size(); ++w) {
      if (contributed[w]) out.push_back(static_cast<int>(w));
    }
    return out;
  }

  // A push of step t, or a pull for step t+1, means every worker pushed the
  // steps before t: the version jumps to t (the updates between are lost)
  // and the step being collected starts afresh. A pull for step version+1
  // from a worker that has not pushed the current step here means its push
  // went to the failed server: a lost contribution, as a skip (the update
  // is the mean of the others).
  CatchUp catch_up(std::size_t chunk, std::int64_t version, std::int64_t key, int worker, std::int64_t step,
                   bool pull) override {
    CatchUp r;
    r.version = version;
    const std::int64_t target = pull ? step - 1 : step;  // every worker pushed the steps below it
    if (target > version) {
      r.lost_updates = target - version;
      r.version = target;
      forget_step(chunk);
      for (int w = 0; w < num_workers_; ++w) raise_clock(chunk, w, target);
    }
    if (pull && step == r.version + 1 && clock(chunk, worker) <= r.version) {
      PushRequest lost{key, worker, r.version, {}, 0, 0.0};
      lost.skip = true;
      r.lost_push = true;
      r.update = on_push(chunk, r.version, lost);
    }
    return r;
  }

 protected:
  // The step not yet applied, unless some worker has already pushed it: then
  // the next (a rank's turn in the ordered sum may have passed, and that
  // step does not wait for the rejoiner).
  std::int64_t rejoin_floor(std::size_t chunk, std::int64_t version) const override {
    return steps_[chunk].num_arrived > 0 ? version + 1 : version;
  }
  // A rejoiner that starts after the step in progress is not waited for in it.
  void on_rejoined(std::size_t chunk, int worker, std::int64_t start, std::int64_t version) override {
    if (start > version) steps_[chunk].excused[static_cast<std::size_t>(worker)] = true;
  }

 private:
  struct Step {
    std::size_t num_elems = 0;
    std::vector<bool> arrived;             // per worker, this step
    int num_arrived = 0;
    int next = 0;                          // the next rank to add to the sum
    int num_added = 0;
    std::vector<float> sum;
    std::vector<float> next_sum;           // add_checked() writes sum + g here, then swaps
    double lr = 0.0;                       // the lowest contributing rank's
    std::vector<std::vector<float>> early;  // per worker: a gradient waiting for lower ranks
    std::vector<double> early_lr;
    std::vector<bool> has_early;
    std::vector<bool> skipped;             // per worker: arrived with a skip push
    std::vector<bool> excused;             // per worker: rejoined after this step began (not in it)
    std::vector<bool> contributed;         // per worker: a gradient in the last step completed (reset())
    std::size_t chunk = 0;                 // its index
    std::int64_t version = 0;              // the step being collected (set by on_push)
    int late = 0;                          // late_starters() of the last step advance() completed

    void reset() {
      for (std::size_t i = 0; i < arrived.size(); ++i) contributed[i] = arrived[i] && !skipped[i];
      std::fill(arrived.begin(), arrived.end(), false);
      std::fill(excused.begin(), excused.end(), false);
      std::fill(skipped.begin(), skipped.end(), false);
      num_arrived = 0;
      next = 0;
      num_added = 0;
    }
  };

  // How the update's pass adds `push`'s gradient to the others of step s:
  // the pass computes partial + g, which must be the bits of the rank-ordered
  // sum. The push must complete the step: every rank from s.next on but its
  // own is in without a gradient to add (a skip push), excused, or not live,
  // or waits early (a dropped worker's early gradient is still added). Then
  // either no early gradient waits (the push is the last in rank order;
  // partial: the sum so far, or nothing when it is the only contribution),
  // or one waits, of a higher rank, and nothing is summed yet: two
  // contributions, and partial is the early one (x + y is y + x, exactly).
  struct Fusion {
    const float* partial = nullptr;
    int contributors = 1;
    double lr = 0.0;       // the lowest contributing rank's
    int early_rank = -1;   // whose early gradient is the partial sum, or -1
  };
  std::optional<Fusion> fusion(const Step& s, const PushRequest& push) const {
    const int worker = push.worker;
    if (push.skip || worker < s.next || worker >= num_workers_ || !live(worker)) return std::nullopt;
    int early = -1;
    for (int r = s.next; r < num_workers_; ++r) {
      const auto i = static_cast<std::size_t>(r);
      if (r == worker) continue;
      if (s.has_early[i]) {
        if (early >= 0 || r < worker) return std::nullopt;
        early = r;
      } else if (!passes_over(s, r, push.step)) {
        return std::nullopt;
      }
    }
    if (early < 0) {
      return Fusion{s.num_added > 0 ? s.sum.data() : nullptr, s.num_added + 1, s.num_added > 0 ? s.lr : push.lr, -1};
    }
    if (s.num_added > 0) return std::nullopt;
    return Fusion{s.early[static_cast<std::size_t>(early)].data(), 2, push.lr, early};
  }

  // An update with fewer workers in it than the job has (one dropped) is
  // partial; a vacant slot is not in the job.
  Update counted(Update u, int late) const {
    u.partial = u.contributors + u.skips + late < num_workers_ - num_vacant();
    u.whole_step = true;
    return u;
  }

  // An update of `chunk` to apply (counted) ends its catch-up after a rejoin.
  std::optional<Update> completed(std::size_t chunk, std::optional<Update> u) {
    if (!u) return u;
    end_catch_up(chunk);
    return counted(*u, steps_[chunk].late);
  }

  void forget_step(std::size_t chunk) {
    Step& s = steps_.at(chunk);
    s.reset();
    std::fill(s.has_early.begin(), s.has_early.end(), false);
  }

  static Update fused_update(const Fusion& f, const PushRequest& push, int skips) {
    update::GradSource g = push.grad;
    g.mean_of = f.contributors;
    g.partial = f.partial;
    Update u{g, push.num_elems, f.lr, f.contributors, skips};
    u.unchecked = true;
    return u;
  }

  // Adds the pushed contribution of rank s.next (copying the first) in one
  // pass that also checks it: with a NaN or Inf the push is rejected and the
  // sum is as before (the new sum goes to a second buffer, swapped in after).
  void add_checked(Step& s, const PushRequest& push) {
    if (s.num_added == 0) {
      s.sum.resize(s.num_elems);
      if (const std::int64_t bad = copy_in(push.grad, s.sum.data(), s.num_elems); bad != 0) {
        reject_non_finite(push, bad);  // num_added stays 0: the buffer is unused
      }
      s.lr = push.lr;
    } else {
      s.next_sum.resize(s.num_elems);
      const float* sum = s.sum.data();
      float* out = s.next_sum.data();
      if (const std::int64_t bad = run_ranges(ranges_, s.num_elems, [&](std::size_t b, std::size_t e) {
            return update::add_checked(sum + b, update::offset(push.grad, b), out + b, e - b);
          });
          bad != 0) {
        reject_non_finite(push, bad);
      }
      s.sum.swap(s.next_sum);
    }
    ++s.num_added;
    ++s.next;
  }

  // update::copy_checked split over the server's apply threads.
  std::int64_t copy_in(const update::GradSource& g, float* out, std::size_t num_elems) {
    return run_ranges(ranges_, num_elems, [&](std::size_t b, std::size_t e) {
      return update::copy_checked(update::offset(g, b), out + b, e - b);
    });
  }

  // Adds the contribution of rank s.next (copying the first): an early
  // arrival, checked when it came.
  void add(Step& s, std::span<const float> grad, double lr) {
    if (s.num_added == 0) {
      s.sum.assign(grad.begin(), grad.end());
      s.lr = lr;
    } else {
      float* sum = s.sum.data();
      const float* g = grad.data();
      for (std::size_t i = 0; i < s.num_elems; ++i) sum[i] += g[i];
    }
    ++s.num_added;
    ++s.next;
  }

  // Moves `next` past ranks that will not contribute and adds early arrivals
  // whose turn came; returns the update when every live worker is in.
  // The last contribution, when it is an early arrival, is not added: the
  // update's pass adds it to the sum (GradSource::partial; it was checked
  // when it came), one pass over the chunk fewer, the same bits.
  std::optional<Update> advance(Step& s) {
    int last_early = -1;  // its rank
    while (s.next < num_workers_) {
      const auto n = static_cast<std::size_t>(s.next);
      if (s.has_early[n]) {
        s.has_early[n] = false;
        if (last_in_order(s, s.next)) {
          last_early = s.next++;
        } else {
          add(s, s.early[n], s.early_lr[n]);
        }
      } else if (passes_over(s, s.next)) {
        ++s.next;
      } else {
        break;
      }
    }
    for (int w = 0; w < num_workers_; ++w) {
      const auto i = static_cast<std::size_t>(w);
      if (live(w) && !s.arrived[i] && !s.excused[i] && !starts_later(s, w, s.version)) return std::nullopt;
    }
    if (s.next < num_workers_) return std::nullopt;  // cannot happen: every rank is in or not live
    const int added = s.num_added;
    const int contributors = added + (last_early >= 0 ? 1 : 0);
    const int skips = skips_of(s);
    s.late = late_starters(s, s.version);
    s.reset();
    if (contributors == 0) return Update{{}, 0, 0.0, 0, skips};  // every arrival was a skip: an empty update
    // The mean (times 1/n for a power of two, else / n) is taken in the update's pass.
    if (last_early < 0) {
      return Update{update::GradSource{s.sum.data(), nullptr, contributors}, s.num_elems, s.lr, contributors, skips};
    }
    const auto e = static_cast<std::size_t>(last_early);
    const update::GradSource g{s.early[e].data(), nullptr, contributors, added > 0 ? s.sum.data() : nullptr};
    return Update{g, s.num_elems, added > 0 ? s.lr : s.early_lr[e], contributors, skips};
  }

  // Whether rank r adds nothing to step s of its own: it came with a skip
  // push, is excused (rejoined after the step began), or is not live (an
  // early gradient it left before a drop is still added: has_early).
  bool passes_over(const Step& s, int r) const { return passes_over(s, r, s.version); }
  bool passes_over(const Step& s, int r, std::int64_t version) const {
    const auto i = static_cast<std::size_t>(r);
    return s.skipped[i] || s.excused[i] || !live(r) || starts_later(s, r, version);
  }
  // A worker that joined from a later step (join_worker: its clock is past
  // the step being collected, which it has not pushed) is not in this step.
  bool starts_later(const Step& s, int r, std::int64_t version) const {
    return !s.arrived[static_cast<std::size_t>(r)] && worker_clock(s.chunk, r) > version;
  }
  int late_starters(const Step& s, std::int64_t version) const {
    int n = 0;
    for (int w = 0; w < num_workers_; ++w) {
      n += live(w) && !s.excused[static_cast<std::size_t>(w)] && starts_later(s, w, version);
    }
    return n;
  }

  static int skips_of(const Step& s) { return static_cast<int>(std::count(s.skipped.begin(), s.skipped.end(), true)); }

  // Whether no rank after `rank` has a contribution to come in step s: each
  // passes over it, with no early gradient waiting.
  bool last_in_order(const Step& s, int rank) const {
    for (int r = rank + 1; r < num_workers_; ++r) {
      const auto i = static_cast<std::size_t>(r);
      if (s.has_early[i] || !passes_over(s, r)) return false;
    }
    return true;
  }

  std::vector<Step> steps_;
  RangeRunner* ranges_;  // the server's apply threads for the sum's passes (null: this thread)
};

// ---- async and ssp ---------------------------------------------------------------

class AsyncPolicy : public ConsistencyPolicy {
 public:
  AsyncPolicy(std::size_t num_chunks, int num_workers) : ConsistencyPolicy(num_chunks, num_workers) {}

  std::optional<Update> on_push(std::size_t chunk, std::int64_t, const PushRequest& push) override {
    check_step(chunk, push);
    record_step(chunk, push);  // a skip advances the worker's clock (ssp) and applies nothing
    if (push.skip) return std::nullopt;
    return own_update(push);
  }

  std::optional<Update> update_on_arrival(std::size_t, std::int64_t, const PushRequest& push) const override {
    if (push.skip) return std::nullopt;
    return own_update(push);
  }

  bool pull_ready(std::size_t, std::int64_t, int, std::int64_t) const override { return true; }

  std::vector<std::optional<Update>> drop_worker(int worker) override {
    mark_dropped(worker);
    return std::vector<std::optional<Update>>(num_chunks());
  }

  std::int64_t clock_gap(std::size_t, std::int64_t) const override { return 0; }

  std::optional<std::int64_t> staleness(std::int64_t version, std::int64_t pulled) const override {
    return version - pulled;
  }

  void begin_catch_up() override {
    ConsistencyPolicy::begin_catch_up();
    unseen_.assign(num_chunks(), std::vector<bool>(static_cast<std::size_t>(num_workers_), true));
  }

  // The worker's clock jumps to the request's step (the pushes between are
  // lost); nothing waits. The chunk is caught up once every worker was heard from.
  CatchUp catch_up(std::size_t chunk, std::int64_t version, std::int64_t, int worker, std::int64_t step,
                   bool) override {
    CatchUp r;
    r.version = version;
    const std::int64_t before = clock(chunk, worker);
    if (step > before) {
      r.lost_updates = step - before;
      raise_clock(chunk, worker, step);
    }
    std::vector<bool>& unseen = unseen_[chunk];
    unseen[static_cast<std::size_t>(worker)] = false;
    if (std::find(unseen.begin(), unseen.end(), true) == unseen.end()) end_catch_up(chunk);
    return r;
  }

 protected:
  // A push applied as it arrives: its own gradient, checked by the store's update pass.
  static Update own_update(const PushRequest& push) {
    Update u{push.grad, push.num_elems, push.lr, 1, 0};
    u.unchecked = true;
    return u;
  }
  std::int64_t rejoin_floor(std::size_t chunk, std::int64_t) const override {
    return num_live() > 0 ? min_live_clock(chunk) : 0;  // none live: its own clock decides
  }

 private:
  std::vector<std::vector<bool>> unseen_;  // catching up: [chunk][worker] not heard from yet
};

class SspPolicy final : public AsyncPolicy {
 public:
  SspPolicy(std::size_t num_chunks, int num_workers, int bound)
      : AsyncPolicy(num_chunks, num_workers), bound_(bound) {}

  bool pull_ready(std::size_t chunk, std::int64_t, int, std::int64_t step) const override {
    return clock_gap(chunk, step) <= bound_;
  }

  std::int64_t clock_gap(std::size_t chunk, std::int64_t step) const override {
    const std::int64_t slowest = min_live_clock(chunk);
    return slowest >= step ? 0 : step - slowest;
  }

 private:
  std::int64_t bound_;
};

}  // namespace

std::unique_ptr<ConsistencyPolicy> make_consistency_policy(const ConsistencyOptions& options,
                                                           const std::vector<std::int64_t>& chunk_elems,
                                                           int num_workers, RangeRunner* ranges) {
  if (num_workers < 1) throw ConfigError("consistency policy: need at least 1 worker");
  switch (options.mode) {
    case Mode::kSync:
      return std::make_unique<SyncPolicy>(chunk_elems, num_workers, ranges);
    case Mode::kAsync:
      return std::make_unique<AsyncPolicy>(chunk_elems.size(), num_workers);
    case Mode::kSsp: {
      if (options.staleness_bound < 0) {
        throw ConfigError("ps.staleness_bound: expected an integer >= 0, got " +
                          std::to_string(options.staleness_bound));
      }
      return std::make_unique<SspPolicy>(chunk_elems.size(), num_workers, options.staleness_bound);
    }
    case Mode::kAllreduce:
      break;
  }
  throw ConfigError("consistency policy: mode \"" + std::string(to_string(options.mode)) + "\" runs no servers");
}

}  // namespace pstrain
