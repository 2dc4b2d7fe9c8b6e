#include "tools/launcher/launcher.h"

#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "common/checkpoint/checkpoint.h"
#include "common/base/errors.h"
#include "common/base/job_clock.h"
#include "common/base/log.h"
#include "common/node/node_cli.h"
#include "common/wire/job_secret.h"
#include "common/wire/security.h"
#include "tools/launcher/fencing.h"
#include "tools/launcher/grow.h"
#include "tools/launcher/live_status.h"
#include "tools/launcher/metrics_tail.h"
#include "tools/launcher/node_exit.h"
#include "tools/launcher/restart_policy.h"
#include "tools/launcher/run_dir.h"
#include "tools/launcher/run_end.h"
#include "tools/launcher/supervisor.h"
#include "tools/report/summary.h"
#include "tools/report/text_file.h"
#include "tools/report/trace_merge.h"

namespace pstrain::launcher {
namespace {

using Clock = Supervisor::Clock;
using std::chrono::milliseconds;

constexpr milliseconds kStartupPoll{50};     // how often to look for the endpoint file
constexpr milliseconds kRunTick{250};        // the status line's pace; signals wake us at once
constexpr milliseconds kPeerAbortGrace{2000};  // after a peer-abort exit, let the others report

// "[   1.234 launch] message" on stderr, on the job clock like every node's lines.
void say(const JobClock& clock, const std::string& message) {
  std::fflush(stdout);
  std::fprintf(stderr, "%s%s\n", log_prefix(clock.now_s(), "launch").c_str(), message.c_str());
  std::fflush(stderr);
}

// Variables by which an enclosing job (torchrun, SLURM, MPI) would tell our
// nodes their rank, job size, scheduler or GPU: we say those ourselves.
constexpr const char* kEnclosingJobEnv[] = {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK",
                                            "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID",
                                            "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"};

// "SIGINT"
std::string sigabbrev(int signal) {
  const char* name = sigabbrev_np(signal);
  return name != nullptr ? std::string("SIG") + name : "signal " + std::to_string(signal);
}

// "1.5 s", "30 s"
std::string seconds_text(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g s", seconds);
  return buf;
}

milliseconds to_ms(double seconds) { return milliseconds(static_cast<std::int64_t>(seconds * 1000.0)); }

class Launch {
 public:
  Launch(const LaunchOptions& options, LaunchPlan plan, SignalWatch& signals, JobClock clock)
      : options_(options),
        plan_(std::move(plan)),
        job_clock_(clock),
        status_(status_options(options_, plan_, job_clock_)),
        supervisor_(SupervisorOptions{plan_.run_dir / "logs", !options.quiet, stdout, 5, job_clock_,
                                      [this] { status_.hide(); },
                                      [this](const std::string& node, std::string_view line) {
                                        status_.node_line(node, line);
                                      },
                                      !plan_.resume_dir.empty()},
                    signals),
        start_(Clock::now()),
        failures_(plan_.failures_file()) {
    failures_.skip_existing();  // a resumed run's earlier failures are about processes long gone
    // Every process of the job measures time from this origin (common/base/job_clock.h).
    setenv(kJobStartEnv, std::to_string(job_clock_.origin_unix_us()).c_str(), 1);
    for (const char* name : kEnclosingJobEnv) unsetenv(name);
    setenv(kLauncherEnv, std::to_string(getpid()).c_str(), 1);  // it writes config.toml, not the scheduler
    std::ofstream(plan_.exits_file(), std::ios::trunc);  // this launch's node exits, for its scheduler
    std::ofstream(plan_.ctl_file(), std::ios::trunc);    // this launch's resize requests (pstrain-ctl)
  }

  // The job, then its timeline (also after a failure: it shows where it
  // stopped) and, when it ended early, the summary of what ran.
  int run() {
    const int code = run_job();
    merge_timeline();
    if (!ending_.empty()) {
      if (const std::string line = write_partial_summary(plan_.run_dir, ending_); !line.empty()) say(line);
    }
    return code;
  }

 private:
  int run_job() {
    say("run dir " + plan_.run_dir.string() + ": starting the scheduler, " + std::to_string(plan_.num_servers) +
        " server(s) and " + std::to_string(plan_.num_workers) + " worker(s)");
    start(scheduler_spec(plan_));
    std::string endpoint;
    if (const auto code = await_endpoint(endpoint)) return *code;
    say("scheduler is at " + endpoint);
    endpoint_ = endpoint;
    for (const NodeSpec& spec : node_specs(plan_, endpoint)) start(spec);
    if (const auto code = await_job_end()) return *code;
    return summarize();
  }

  // RUN_DIR/trace/*.json -> RUN_DIR/trace.json; problems are reported, not fatal.
  void merge_timeline() {
    if (plan_.config.output.trace == "off") return;
    try {
      const report::TraceMergeResult r = report::merge_trace(plan_.run_dir);
      for (const std::string& e : r.errors) say("trace: " + e);
      if (r.output.empty()) {
        say("trace: no process wrote a timeline to " + (plan_.run_dir / "trace").string());
      } else {
        say("trace: " + std::to_string(r.events) + " spans of " + std::to_string(r.parts) + " processes in " +
            r.output.string() + (r.dropped_events > 0 ? " (" + std::to_string(r.dropped_events) +
                                                            " dropped at the per-process cap)" : ""));
      }
    } catch (const std::exception& e) {
      say(std::string("trace: merge failed: ") + e.what());
    }
  }

  static LiveStatusOptions status_options(const LaunchOptions& o, const LaunchPlan& plan, const JobClock& clock) {
    LiveStatusOptions s;
    s.run_dir = plan.run_dir;
    s.num_workers = plan.num_workers;
    s.async = plan.config.mode == Mode::kAsync || plan.config.mode == Mode::kSsp;
    s.out = stdout;
    s.terminal = isatty(STDOUT_FILENO) != 0;
    s.interval_s = o.status_interval_s;
    s.clock = clock;
    s.resume = !plan.resume_dir.empty();
    return s;
  }

  void say(const std::string& message) {
    status_.hide();
    launcher::say(job_clock_, message);
  }

  // `condition` with the status line's tick and the fencing first (cheap, never blocks).
  std::function<bool()> with_status(std::function<bool()> condition) {
    return [this, condition = std::move(condition)] {
      status_.tick();
      fence_failed_nodes();
      const auto nodes = [this] { return supervisor_.states(); };
      for (const NodeSpec& joiner : grower_.take(nodes, endpoint_, [this](const std::string& m) { say(m); })) {
        if (const std::optional<NodeName> name = parse_node_name(joiner.name)) status_.start_joiner(name->rank);
        start(joiner);
      }
      return condition();
    };
  }

  // Kills each node the scheduler declared failed for its silence whose
  // process is still running (tools/launcher/fencing.h); its exit then goes
  // through the failure policy (tolerated_worker_failure). A node over ssh
  // under "continue" is left alone until the job has ended: across a cut
  // link it learns by itself that it was dropped, and its reason reaches its
  // log through the session, which a kill would end.
  // The supervisor wakes for every batch of output: the file is read at the
  // status line's pace (kRunTick), unless `now` (the job's end).
  void fence_failed_nodes(bool now = false) {
    const auto at = Clock::now();
    if (!now && at < next_fence_check_) return;
    next_fence_check_ = at + kRunTick;
    for (const std::string& line : failures_.read_lines()) {
      std::string error;
      if (std::optional<DeclaredFailure> failure = parse_declared_failure(line, error)) {
        const std::optional<int> rank = worker_rank_of(failure->node);
        if (grower_.is_joiner(failure->node)) joiner_restarts_.declared(failure->node, failure->pid);
        if (rank && failure->silent) {  // one that exited is shown when its exit is reaped
          const bool restart = failure_policy(plan_.config, failure->node) == WorkerFailurePolicy::kRestart;
          status_.set_worker_state(*rank, restart ? WorkerStatus::State::kRestarting : WorkerStatus::State::kDropped);
        }
        unfenced_.push_back(std::move(*failure));
      } else {
        say("ignored a line of " + plan_.failures_file().string() + ": " + error);
      }
    }
    const std::vector<NodeState> nodes = supervisor_.states();  // a kill changes no state until the exit is reaped
    for (auto it = unfenced_.begin(); it != unfenced_.end();) {
      const std::optional<std::size_t> node = node_to_fence(nodes, *it);
      if (node && nodes[*node].spec.stdin_pipe && !job_ended_ &&
          failure_policy(plan_.config, nodes[*node].spec.name) != WorkerFailurePolicy::kRestart) {
        ++it;  // over ssh, under "continue": when the job has ended and it has not exited by itself
        continue;
      }
      if (node && supervisor_.kill_node(*node)) {
        say(nodes[*node].spec.name + " (pid " + std::to_string(nodes[*node].pid) +
            ") is still running after the scheduler declared it failed (" + it->reason +
            "): stopped, hung or cut off; killed it (SIGKILL), so that its failure policy applies");
      }
      it = unfenced_.erase(it);
    }
    restart_due_joiners();
  }

  std::optional<Clock::time_point> deadline() const {
    if (!options_.timeout_s) return std::nullopt;
    return start_ + to_ms(*options_.timeout_s);
  }

  // Waits for the scheduler's endpoint file; an exit code if that failed.
  std::optional<int> await_endpoint(std::string& endpoint) {
    std::optional<std::string> found;
    const auto limit = std::min(deadline().value_or(Clock::time_point::max()),
                                Clock::now() + to_ms(options_.startup_timeout_s));
    const auto outcome = supervisor_.run_until(
        [&] { return (found = read_endpoint_file(plan_.endpoint_file())).has_value() || supervisor_.exited(0); },
        limit, kStartupPoll);
    if (outcome.event != Supervisor::Event::kCondition) return abort_run(outcome, true);
    if (!found) {
      say("the scheduler exited before writing its endpoint to " + plan_.endpoint_file().string());
      return fail_after_stop();
    }
    endpoint = *found;
    return std::nullopt;
  }

  // Waits for the scheduler to end the job, then for the rest to exit (at
  // most shutdown_timeout_s more); an exit code if something failed.
  std::optional<int> await_job_end() {
    Supervisor::Outcome outcome;
    do {
      outcome = supervisor_.run_until(with_status([&] { return supervisor_.exited(0); }), deadline(), kRunTick);
    } while (tolerated_worker_failure(outcome));
    if (outcome.event != Supervisor::Event::kCondition) return abort_run(outcome, false);
    const auto limit = Clock::now() + to_ms(options_.shutdown_timeout_s);
    do {
      outcome = supervisor_.run_until(with_status([&] { return supervisor_.all_exited(); }),
                                      std::min(limit, deadline().value_or(limit)), kRunTick);
    } while (tolerated_worker_failure(outcome));
    const bool overall_timeout = deadline() && Clock::now() >= *deadline();
    if (outcome.event == Supervisor::Event::kDeadline && !overall_timeout && only_declared_failed_running()) {
      // The job is over and all that is left was declared failed (a dropped
      // worker over ssh that did not exit by itself): fence it now.
      job_ended_ = true;
      fence_failed_nodes(/*now=*/true);
      const auto fenced_by = Clock::now() + milliseconds(10000);  // SIGKILL, and ssh's wrapper's own 10 s at most
      do {
        outcome = supervisor_.run_until(with_status([&] { return supervisor_.all_exited(); }),
                                        std::min(fenced_by, deadline().value_or(fenced_by)), kRunTick);
      } while (tolerated_worker_failure(outcome));
    }
    if (outcome.event == Supervisor::Event::kDeadline && !overall_timeout) {
      say("the scheduler ended the job, but these did not exit within --shutdown-timeout-s " +
          seconds_text(options_.shutdown_timeout_s) + ": " + running_names());
      return fail_after_stop();
    }
    if (outcome.event != Supervisor::Event::kCondition) return abort_run(outcome, false);
    return std::nullopt;
  }

  // cluster.on_worker_failure = "continue": a worker that fails is one the
  // scheduler drops and the job goes on without; say so and keep waiting.
  // "restart" (tools/launcher/restart_policy.h): a new process of that rank
  // with --rejoin, at most max_restarts times; past that a worker is let go
  // as under "continue" and a server ends the job.
  bool tolerated_worker_failure(const Supervisor::Outcome& outcome) {
    if (outcome.event != Supervisor::Event::kFailure) return false;
    const NodeState n = supervisor_.states().at(outcome.node);  // states() is a copy: keep the node, not a reference
    const WorkerFailurePolicy policy = failure_policy(plan_.config, n.spec.name);
    const bool joiner = grower_.is_joiner(n.spec.name);
    if (joiner && !joiner_restarts_.member(n.spec.name)) {  // the scheduler decides: an abandoned join, or its policy
      supervisor_.tolerate(outcome.node);
      tell_scheduler_of_exit(n, WorkerStatus::State::kDropped);
      say(n.spec.name + " (a joiner) " + describe_exit(*n.status) + ": told the scheduler" +
          (policy == WorkerFailurePolicy::kRestart ? " (restarted if it had passed its boundary)" : ""));
      if (policy == WorkerFailurePolicy::kRestart) {
        joiner_restarts_.exited({n.spec.name, n.pid, n.spec.stdin_pipe, describe_exit(*n.status)});
        restart_due_joiners();
      }
      return true;
    }
    const std::optional<NodeName> name = parse_node_name(n.spec.name);
    const bool retired = !joiner && name && name->role == "worker" && status_.retired(name->rank);
    if (policy == WorkerFailurePolicy::kRestart && !retired) {  // a retired rank left the job: never restarted
      if (const std::optional<int> take = restarts_.take(n.spec.name)) {
        supervisor_.tolerate(outcome.node);
        tell_scheduler_of_exit(n, WorkerStatus::State::kRestarting);
        say(restart_line(n.spec.name, describe_exit(*n.status), *take, restarts_.max()));
        start(restart_spec(n.spec.name));
        return true;
      }
    }
    if (!drops_failed_workers(policy)) return false;
    if (n.spec.name.rfind("worker ", 0) != 0) return false;
    supervisor_.tolerate(outcome.node);
    tell_scheduler_of_exit(n, WorkerStatus::State::kDropped);
    say(n.spec.name + " " + describe_exit(*n.status) +
        (policy == WorkerFailurePolicy::kRestart ? ": restarted " + std::to_string(restarts_.used(n.spec.name)) +
                                   " times already (cluster.max_restarts = " + std::to_string(restarts_.max()) +
                                   "): the job goes on without it, as under \"continue\""
                             : std::string(": the job goes on without it (cluster.on_worker_failure = \"continue\")")));
    // It failed on its own (an exit code, or a signal other than a kill, such
    // as SIGABRT from std::terminate): say why, as for a failure that ends the job.
    if (!n.status->signaled || (n.status->code != SIGKILL && n.status->code != SIGTERM)) {
      for (const std::string& line : n.stderr_tail) say("  " + line);
    }
    return true;
  }

  // Joiners the scheduler declared failed after their boundary (JoinerRestarts):
  // restarted with --rejoin like any rank, against the same budget.
  void restart_due_joiners() {
    for (const JoinerRestarts::Exit& e : joiner_restarts_.take_due()) {
      const std::optional<int> take = restarts_.take(e.name);
      if (!take) {
        say(e.name + " (a member since its boundary) " + e.text + ": restarted " + std::to_string(restarts_.used(e.name)) +
            " times already (cluster.max_restarts = " + std::to_string(restarts_.max()) + "): the job goes on without it");
        continue;
      }
      if (const std::optional<NodeName> name = parse_node_name(e.name)) {
        status_.set_worker_state(name->rank, WorkerStatus::State::kRestarting);
      }
      say(restart_line(e.name, e.text + " (a member since its boundary)", *take, restarts_.max()));
      start(restart_spec(e.name));
    }
  }

  NodeSpec restart_spec(const std::string& name) const {
    const std::optional<NodeName> n = parse_node_name(name);
    if (grower_.is_joiner(name) && n) return rejoin_joiner_spec(plan_, endpoint_, n->rank);
    return rejoin_spec(plan_, endpoint_, name);
  }

  // A node's failure the job goes on without: the scheduler is told now (not
  // after its heartbeat timeout; a node over ssh is left to it: its exit may
  // be the link's), and the status line shows the worker as `state`.
  void tell_scheduler_of_exit(const NodeState& n, WorkerStatus::State state) {
    if (const std::optional<int> rank = worker_rank_of(n.spec.name)) status_.set_worker_state(*rank, state);
    if (n.spec.stdin_pipe) return;
    const std::string error = report_exit(plan_.exits_file(), n.spec.name, n.pid, describe_exit(*n.status));
    if (!error.empty()) say("could not tell the scheduler of " + n.spec.name + "'s exit: " + error);
  }

  // Whether every node still running is one the scheduler declared failed
  // and fencing has left for the job's end.
  bool only_declared_failed_running() {
    fence_failed_nodes(/*now=*/true);  // the last lines of failures.jsonl
    const std::vector<NodeState> nodes = supervisor_.states();
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      if (nodes[i].status) continue;
      bool declared = false;
      for (const DeclaredFailure& f : unfenced_) declared = declared || node_to_fence(nodes, f) == i;
      if (!declared) return false;
    }
    return true;
  }

  void start(const NodeSpec& spec) {
    supervisor_.start(spec);
    report::write_text_file_atomic(plan_.run_dir / "pids.txt", supervisor_.pids_text());
  }

  std::string running_names() const {
    std::string names;
    for (const NodeState& n : supervisor_.states()) {
      if (!n.status) names += (names.empty() ? "" : ", ") + n.spec.name;
    }
    return names.empty() ? "none" : names;
  }

  int abort_run(const Supervisor::Outcome& outcome, bool starting) {
    if (outcome.event == Supervisor::Event::kSignal) {
      ending_ = std::string("interrupted by signal ") + std::to_string(outcome.signal) + " (" +
                sigabbrev(outcome.signal) + ")";
    }
    status_.finish(outcome.event == Supervisor::Event::kSignal ? "interrupted" : "failed");
    switch (outcome.event) {
      case Supervisor::Event::kSignal:
        say(std::string("got signal ") + std::to_string(outcome.signal) + " (" + strsignal(outcome.signal) +
            "): stopping " + running_names());
        supervisor_.stop_all(to_ms(options_.grace_s));
        return 128 + outcome.signal;
      case Supervisor::Event::kDeadline:
        if (starting) {
          say("the scheduler did not write its endpoint to " + plan_.endpoint_file().string() + " in time");
        } else {
          ending_ = "failed: did not finish within --timeout-s " + seconds_text(*options_.timeout_s);
          say("the run did not finish within --timeout-s " + seconds_text(*options_.timeout_s) +
              "; still running: " + running_names());
        }
        return fail_after_stop();
      case Supervisor::Event::kFailure:
        return report_failure(outcome.node);
      case Supervisor::Event::kWriteFailure:
        say(supervisor_.write_failure() + ": stopping " + running_names() +
            " (a run whose logs are cut is not a result; free space and run again)");
        return fail_after_stop();
      case Supervisor::Event::kCondition:
        break;
    }
    return kExitFailed;
  }

  int fail_after_stop() {
    status_.finish("failed");
    if (ending_.empty()) ending_ = "failed";
    supervisor_.stop_all(to_ms(options_.grace_s));
    say("run failed; logs in " + (plan_.run_dir / "logs").string());
    return kExitFailed;
  }

  int report_failure(std::size_t first_failed) {
    if (aborted_by_peer(*supervisor_.states().at(first_failed).status)) {
      // The scheduler aborted the job: give the node that failed time to exit and say why.
      supervisor_.run_until([&] { return supervisor_.all_exited() || real_failure_seen(); },
                            Clock::now() + kPeerAbortGrace, kRunTick, false);
    }
    supervisor_.stop_all(to_ms(options_.grace_s));
    const std::vector<NodeState> nodes = supervisor_.states();
    const NodeState* cause = root_cause(nodes);
    // Only "aborted" exits: the culprit is in the scheduler's reason (a node
    // that went silent, e.g. stopped or cut off, exits last or never).
    if (aborted_by_peer(*cause->status)) {
      if (const std::optional<std::string> why = scheduler_abort_reason(nodes)) {
        say("the scheduler aborted the job: " + *why);
      }
    }
    if (!cause->status->signaled && cause->status->code == kExitDiverged) {
      for (const std::string& line : cause->stderr_tail) {  // the worker's one line is the headline
        const auto at = line.find("training diverged");
        if (at == std::string::npos) continue;
        const auto start = line.rfind("worker ", at);
        say(line.substr(start == std::string::npos ? at : start));
        break;
      }
    }
    say(cause->spec.name + " " + describe_exit(*cause->status));
    ending_ = "failed: " + cause->spec.name + " " + describe_exit(*cause->status);
    if (!cause->stderr_tail.empty()) say("last lines of " + cause->spec.name + "'s stderr:");
    for (const std::string& line : cause->stderr_tail) say("  " + line);
    for (const NodeState& n : nodes) {
      if (&n != cause && failed_on_its_own(n)) {
        say("then " + n.spec.name + " " + describe_exit(*n.status));
      }
    }
    say("stopped the other processes; run failed; logs in " + (plan_.run_dir / "logs").string());
    const bool diverged = !cause->status->signaled && cause->status->code == kExitDiverged;
    return diverged ? kExitDiverged : kExitFailed;
  }

  // The scheduler's "aborting the job: <reason>" line, from its stderr tail or log.
  std::optional<std::string> scheduler_abort_reason(const std::vector<NodeState>& nodes) const {
    static constexpr std::string_view kMark = "aborting the job: ";
    for (const NodeState& n : nodes) {
      if (n.spec.name != "scheduler") continue;
      for (auto it = n.stderr_tail.rbegin(); it != n.stderr_tail.rend(); ++it) {
        const auto at = it->find(kMark);
        if (at != std::string::npos) return it->substr(at + kMark.size());
      }
    }
    return std::nullopt;
  }

  bool real_failure_seen() const {
    for (const NodeState& n : supervisor_.states()) {
      if (failed_on_its_own(n) && !aborted_by_peer(*n.status)) return true;
    }
    return false;
  }

  int summarize() {
    status_.finish("");
    try {
      const report::RunSummary s = report::write_run_summary(plan_.run_dir);
      std::fflush(stderr);
      std::printf("\n%s\nRun directory: %s\nFigures and an HTML page: tools/report.sh %s (writes %s)\n",
                  report::summary_markdown(s, plan_.run_dir.string()).c_str(), plan_.run_dir.string().c_str(),
                  plan_.run_dir.string().c_str(), (plan_.run_dir / "report" / "index.html").string().c_str());
      std::fflush(stdout);
      return kExitOk;
    } catch (const std::exception& e) {
      say(std::string("every process exited 0, but the run's summary failed: ") + e.what());
      return kExitFailed;
    }
  }

  const LaunchOptions& options_;
  LaunchPlan plan_;
  JobClock job_clock_;
  LiveStatus status_;  // before supervisor_, whose echo hides it
  Supervisor supervisor_;
  Clock::time_point start_;
  std::string endpoint_;  // the scheduler's, once known (restarts dial it)
  Grower grower_{plan_};  // joiners for pstrain-ctl's grow requests (tools/launcher/grow.h)
  RestartBudget restarts_{plan_.config.cluster.max_restarts};
  JoinerRestarts joiner_restarts_;  // joiners that failed, restarted once declared members (restart_policy.h)
  MetricsTail failures_;  // RUN_DIR/failures.jsonl, from the scheduler
  std::vector<DeclaredFailure> unfenced_;  // read, not yet dealt with (see fence_failed_nodes)
  Clock::time_point next_fence_check_{};
  // The job is over and only nodes declared failed are left (after
  // --shutdown-timeout-s): fence those over ssh too.
  bool job_ended_ = false;
  // How a run that ended early ended ("interrupted by signal 2 (SIGINT)",
  // "failed: ..."): its partial summary's reason; empty: it finished.
  std::string ending_;
};

}  // namespace

int run_launch(const LaunchOptions& options) {
  const JobClock clock(JobClock::unix_now_us());
  const auto say = [&clock](const std::string& message) { launcher::say(clock, message); };
  LaunchPlan plan;
  try {
    plan = plan_launch(options.request);
  } catch (const ConfigError& e) {
    say(std::string("config error: ") + e.what());
    return kExitConfig;
  }
  for (const std::string& note : plan.notes) say(note);
  if (options.check_only) {  // the resolved config, as config.toml would hold it; nothing touched
    if (const std::string busy = RunDirLock::busy(plan.run_dir); !busy.empty()) {
      say("refused: " + busy);
      return kExitConfig;
    }
    std::fputs(to_toml(plan.config).c_str(), stdout);
    return kExitOk;
  }
  std::optional<RunDirLock> lock;
  try {
    lock.emplace(plan.run_dir);
  } catch (const RunDirBusy& e) {
    say(std::string("refused: ") + e.what());
    return kExitConfig;
  } catch (const std::exception& e) {
    say(std::string("error: ") + e.what());
    return kExitFailed;
  }
  if (const auto pid = lock->stale_pid(); pid && *pid != getpid()) {
    say("took over the lock of " + plan.run_dir.string() + " from launch pid " + std::to_string(*pid) +
        ", which ended without releasing it");
  }
  try {
    if (!plan.resume_dir.empty()) {  // resume: the run's files stay; metrics and logs go on
      for (const std::string& skipped : plan.resume_skipped) say("passed over checkpoint " + skipped);
      say("resuming from " + plan.resume_dir.string() + " (step " + std::to_string(plan.resume_step) + ")");
      // Newer checkpoints (unusable ones, or one the resumed run will write again) belong to
      // the interrupted timeline: gone, so that no later resume can mix the two.
      for (const std::filesystem::path& dir : remove_checkpoints_after(plan.resume_dir.parent_path(), plan.resume_step)) {
        say("removed " + dir.string() + " (newer than the checkpoint resumed from)");
      }
      // What the interrupted run's end (or its scheduler) left: not this run's.
      for (const std::filesystem::path& stale : {plan.endpoint_file(), plan.run_dir / "weights.bin", plan.run_dir / "summary.json",
                                   plan.run_dir / "summary.md"}) {
        std::filesystem::remove(stale);
      }
    } else if (const KeptRun kept = keep_previous_run(plan.run_dir); kept.entries > 0) {
      say("kept the previous run's " + std::to_string(kept.entries) + " file(s) and folder(s) in " +
          kept.moved_to.string());
    }
    if (!plan.generate_keys_in.empty()) {
      write_job_keys(plan.generate_keys_in, true, plan.config.cluster.num_workers);  // one key per worker
      say("security.mode = \"curve\": wrote this run's keys to " + plan.generate_keys_in.string());
    }
    // Mode off: the run's secret; the nodes read it from the file (its path in config.toml, never the secret).
    if (!plan.generate_secret_in.empty()) write_secret_file(plan.generate_secret_in, generate_job_secret());
    if (!plan.security_note.empty()) say(plan.security_note);
    report::write_text_file_atomic(plan.config_file(), to_toml(plan.config));
    SignalWatch signals;
    Launch launch(options, std::move(plan), signals, clock);
    return launch.run();
  } catch (const std::exception& e) {
    say(std::string("error: ") + e.what());
    return kExitFailed;
  }
}

}  // namespace pstrain::launcher
