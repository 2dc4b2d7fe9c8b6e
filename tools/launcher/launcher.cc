#include "tools/launcher/launcher.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/errors.h"
#include "common/job_clock.h"
#include "tools/launcher/run_dir.h"
#include "tools/launcher/supervisor.h"
#include "tools/report/summary.h"
#include "tools/report/text_file.h"
#include "tools/report/trace_merge.h"

namespace pstrain::launcher {
namespace {

using Clock = Supervisor::Clock;
using std::chrono::milliseconds;

constexpr milliseconds kStartupPoll{50};     // how often to look for the endpoint file
constexpr milliseconds kRunTick{1000};       // nothing to do but wait: signals wake us
constexpr milliseconds kPeerAbortGrace{2000};  // after a peer-abort exit, let the others report

void say(const std::string& message) {
  std::fflush(stdout);
  std::fprintf(stderr, "launch: %s\n", message.c_str());
}

// "1.5 s", "30 s"
std::string seconds_text(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g s", seconds);
  return buf;
}

milliseconds to_ms(double seconds) { return milliseconds(static_cast<std::int64_t>(seconds * 1000.0)); }

// describe() plus what the node programs' exit codes mean.
std::string describe_exit(const ExitStatus& status) {
  std::string text = describe(status);
  if (!status.signaled && status.code == 2) text += " (aborted: a peer failed)";
  if (!status.signaled && status.code == 3) text += " (config error)";
  if (!status.signaled && status.code == 127) text += " (could not be executed)";
  return text;
}

bool failed_on_its_own(const NodeState& n) { return n.status && !n.status->ok() && !n.stopped_by_us; }
// Exit code 2: the node stopped because the scheduler aborted the job.
bool aborted_by_peer(const ExitStatus& s) { return !s.signaled && s.code == 2; }

// The failure to blame: the first to fail on its own, preferring a real
// error over an "aborted because a peer failed" exit.
const NodeState* root_cause(const std::vector<NodeState>& nodes) {
  const NodeState* first = nullptr;
  const NodeState* first_real = nullptr;
  for (const NodeState& n : nodes) {
    if (!failed_on_its_own(n)) continue;
    const bool real = !aborted_by_peer(*n.status);
    if (!first || n.exit_order < first->exit_order) first = &n;
    if (real && (!first_real || n.exit_order < first_real->exit_order)) first_real = &n;
  }
  return first_real ? first_real : first;
}

class Launch {
 public:
  Launch(const LaunchOptions& options, LaunchPlan plan, SignalWatch& signals)
      : options_(options),
        plan_(std::move(plan)),
        supervisor_(SupervisorOptions{plan_.run_dir / "logs", !options.quiet, stdout, 5}, signals),
        start_(Clock::now()) {
    // Every process of the job measures time from this origin (common/job_clock.h).
    setenv(kJobStartEnv, std::to_string(job_clock_.origin_unix_us()).c_str(), 1);
  }

  // The job, then its timeline (also after a failure: it shows where it stopped).
  int run() {
    const int code = run_job();
    merge_timeline();
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
        [&] { return (found = read_endpoint_file(plan_.endpoint_file())) || supervisor_.exited(0); }, limit,
        kStartupPoll);
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
    auto outcome = supervisor_.run_until([&] { return supervisor_.exited(0); }, deadline(), kRunTick);
    if (outcome.event != Supervisor::Event::kCondition) return abort_run(outcome, false);
    const auto limit = Clock::now() + to_ms(options_.shutdown_timeout_s);
    outcome = supervisor_.run_until([&] { return supervisor_.all_exited(); },
                                    std::min(limit, deadline().value_or(limit)), kRunTick);
    const bool overall_timeout = deadline() && Clock::now() >= *deadline();
    if (outcome.event == Supervisor::Event::kDeadline && !overall_timeout) {
      say("the scheduler ended the job, but these did not exit within --shutdown-timeout-s " +
          seconds_text(options_.shutdown_timeout_s) + ": " + running_names());
      return fail_after_stop();
    }
    if (outcome.event != Supervisor::Event::kCondition) return abort_run(outcome, false);
    return std::nullopt;
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
          say("the run did not finish within --timeout-s " + seconds_text(*options_.timeout_s) +
              "; still running: " + running_names());
        }
        return fail_after_stop();
      case Supervisor::Event::kFailure:
        return report_failure(outcome.node);
      case Supervisor::Event::kCondition:
        break;
    }
    return kExitFailed;
  }

  int fail_after_stop() {
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
    say(cause->spec.name + " " + describe_exit(*cause->status));
    if (!cause->stderr_tail.empty()) say("last lines of " + cause->spec.name + "'s stderr:");
    for (const std::string& line : cause->stderr_tail) say("  " + line);
    for (const NodeState& n : nodes) {
      if (&n != cause && failed_on_its_own(n)) {
        say("then " + n.spec.name + " " + describe_exit(*n.status));
      }
    }
    say("stopped the other processes; run failed; logs in " + (plan_.run_dir / "logs").string());
    return kExitFailed;
  }

  bool real_failure_seen() const {
    for (const NodeState& n : supervisor_.states()) {
      if (failed_on_its_own(n) && !aborted_by_peer(*n.status)) return true;
    }
    return false;
  }

  int summarize() {
    try {
      const report::RunSummary s = report::write_run_summary(plan_.run_dir);
      std::fflush(stderr);
      std::printf("\n%s\nRun directory: %s\n", report::summary_markdown(s, plan_.run_dir.string()).c_str(),
                  plan_.run_dir.string().c_str());
      std::fflush(stdout);
      return kExitOk;
    } catch (const std::exception& e) {
      say(std::string("every process exited 0, but the run's summary failed: ") + e.what());
      return kExitFailed;
    }
  }

  const LaunchOptions& options_;
  LaunchPlan plan_;
  Supervisor supervisor_;
  Clock::time_point start_;
  JobClock job_clock_ = JobClock(JobClock::unix_now_us());
};

}  // namespace

int run_launch(const LaunchOptions& options) {
  LaunchPlan plan;
  try {
    plan = plan_launch(options.request);
  } catch (const ConfigError& e) {
    say(std::string("config error: ") + e.what());
    return kExitConfig;
  }
  try {
    if (const int removed = prepare_run_dir(plan.run_dir); removed > 0) {
      say("removed " + std::to_string(removed) + " file(s) of a previous run in " + plan.run_dir.string());
    }
    report::write_text_file_atomic(plan.config_file(), to_toml(plan.config));
    SignalWatch signals;
    Launch launch(options, std::move(plan), signals);
    return launch.run();
  } catch (const std::exception& e) {
    say(std::string("error: ") + e.what());
    return kExitFailed;
  }
}

}  // namespace pstrain::launcher
