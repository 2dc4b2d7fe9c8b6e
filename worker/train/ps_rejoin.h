// A parameter-server worker that rejoins a running job (--rejoin,
// cluster.on_worker_failure = "restart"): a new process that took back the
// rank of a worker the job dropped.
//
// The scheduler re-admits the rank and tells the servers; each server's
// consistency policy sets, per chunk, the step the worker must push next (the
// step the job is at there; server/consistency.h). rejoin_ps_job() probes
// every chunk for that step (a pull at kPullRejoinProbe, answered at once
// with the current weights), joins at J = the highest of them, and sends a
// skip push for step J-1 to every chunk that expects an earlier step (sync:
// at most one step behind; the skip makes no update, so the step completes
// without a gradient from it and nothing is counted twice). Training then
// goes on from step J with the same EpochDriver schedule: the data position
// and learning rate follow from the step, as with resume.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "common/config/config.h"
#include "common/base/log.h"
#include "worker/client/worker_session.h"
#include "worker/train/epoch_driver.h"
#include "worker/train/membership_answer.h"
#include "worker/train/records.h"
#include "worker/train/worker_checkpoint.h"

namespace pstrain {

// Returns J, the step to continue from; `params` holds the servers' current
// weights. A server that has not yet heard of the rejoin refuses the probe:
// it is tried again (every 100 ms) for at most cluster.timeout_ms.
std::int64_t rejoin_ps_job(WorkerSession& session, std::span<float> params, const ClusterConfig& cluster, Logger& log);

// Checkpoints: a rejoiner that joins at J below a checkpoint step S takes
// that checkpoint with the others (its part, then their barrier, which
// waits for it: the scheduler does not count the failed process's arrival).
// One that joins exactly at a checkpoint step J (the others take checkpoint
// J after step J-1, which it did not run here) takes their barrier at the
// start of its first step, where its driver and answers exist
// (ps_worker.cc): pass_rejoin_checkpoint(). The scheduler matches it by name,
// so the barriers stay paired whether the others are still in it, have
// finished it or have not reached it yet (scheduler/barriers.h,
// Barriers::arrive). Its part (`part`, when given) it writes first: it knows
// its place at J (it starts there), and a resume then counts it among the
// checkpoint's members (before, it passed without one, and a resume of an
// elastic job left it out: its share of the rest of that epoch went
// untrained). It writes one only when the others had not passed that barrier
// when it was taken back (SchedulerClient::released_checkpoint): then the
// barrier waits for its arrival and the manifest comes after its part; else
// the manifest may be in the making, and the checkpoint holds the failed
// process's part for J if it wrote one, else none (a resume treats the rank
// as dropped at J: it starts there with fresh counters). Past the barrier it
// writes the manifest when it is the lowest live worker
// (finish_ps_checkpoint: a restarted worker 0), as the others would have.
// `on_news` (when set) answers a membership change announced while it waits
// in the barrier (MembershipAnswers::answer_ahead: a joiner's and a
// rejoiner's answer before their first step).
void pass_rejoin_checkpoint(SchedulerClient& scheduler, const RunConfig& config, std::int64_t join,
                            std::int64_t num_params, int num_servers, Logger& log,
                            const std::function<void()>& on_news = {}, const WorkerCheckpoint* part = nullptr);

// A rejoiner's entry, at the start of its first step `join` (ps_worker.cc calls it from that step's
// function, where the driver knows `after`, the step after it). It answers every membership change
// heard so far with `after` (MembershipAnswers::answer_ahead: due at the boundary after `join`), before
// its pull of `join`, which may wait for a worker that waits for that decision; then it takes the
// checkpoint at `join` when one is due (pass_rejoin_checkpoint, answering from the barrier as well):
// with its part (`make_part`) unless the others had passed that barrier before it was taken back.
void enter_rejoined(SchedulerClient& scheduler, const RunConfig& config, std::int64_t join, std::int64_t num_params,
                    int num_servers, Logger& log, MembershipAnswers& answers, const EpochDriver::NextStep& after,
                    const std::function<WorkerCheckpoint()>& make_part);

// The weights of step `step` for a worker entering a running job (a joiner
// at its boundary, a rejoiner at its step), at the start of its first step:
// the servers answer the pull when their policy allows (sync: once step-1
// is applied; ssp: within the bound of the slowest clock), and meanwhile a
// membership change announced is answered with `on_news`
// (SchedulerClient::answering_news; a joiner's or rejoiner's answer_ahead).
// A worker that waits for that change's decision may not have pushed what
// the pull waits for (ssp: a worker that answered the change that let the
// joiner in early, behind by the bound, and the next change at once, stops
// one push short of it), and the decision waits for this worker's answer.
void pull_entry_weights(WorkerSession& session, std::span<float> weights, std::int64_t step,
                        const std::function<void()>& on_news);

// The rejoined worker's metrics file: its predecessor's, kept up to its
// last whole line and appended to, on its predecessor's time axis (whose
// origin on the job clock the last record with time_s and job_s gives; the
// job clock's when there is none), so the records read as one worker's run.
WorkerStart start_rejoined_worker(int rank, const RunConfig& config, Logger& log);

// The metrics record {"type": "rejoin", "time_s", "step", "job_s"}: this process
// took the rank back and continues from `step` (read by the summary).
void write_rejoin_record(MetricsWriter& metrics, std::int64_t step);

// A --rejoin the scheduler told to leave: a membership change (or a request
// for fewer workers, kRetiredByRequest) left its rank out while it was down
// (WorkerSession::retired_while_down() = `change`). Its metrics file, its
// predecessor's, gets a rejoin record with "step": -1 and "retired_by_change",
// then an end record with "retired": true (the summary counts the
// predecessor's steps and shows the rank retired; the launcher does not
// restart it); it trains nothing and says nothing more to the scheduler.
TrainResult leave_retired_while_down(MetricsWriter& metrics, Logger& log, std::int64_t change);

// Bytes of `path` up to and including its last newline (0 if none or no file).
std::int64_t whole_lines_bytes(const std::string& path);

}  // namespace pstrain
