// Runs the node processes of one local launch and watches them from a
// single poll loop: their output, their exits, and SIGINT/SIGTERM.
//
// Output: every line a node writes (stdout or stderr) goes whole to
// logs/<log_stem>.log as it is and, unless quiet, to our stdout with one
// prefix (tools/launcher/line_prefix.h: the node's own logger prefix, else
// "[<job clock time> <name>] " added);
// the last few stderr lines are kept for failure reports. Lines are never
// split or interleaved mid-line (one thread writes everything).
//
// Exits: a node that exits 0 is done; any other exit (code or signal) that
// we did not cause by stopping it is a failure that ends run_until().
//
// Single-threaded: use from the thread that created the SignalWatch.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/base/job_clock.h"
#include "tools/launcher/child_process.h"
#include "tools/launcher/signal_watch.h"

namespace pstrain::launcher {

struct NodeSpec {
  std::string name;      // "worker 1": output prefix and messages
  std::string log_stem;  // "worker-1": logs/<log_stem>.log, pids.txt
  std::vector<std::string> argv;
  bool stdin_pipe = false;  // stdin on a pipe held open until the node is stopped or exits (tools/launcher/remote.h)
  bool append_log = false;  // a restarted node: add to its log instead of starting it anew
};

struct NodeState {
  NodeSpec spec;
  pid_t pid = -1;
  double started_s = 0;              // job clock (SupervisorOptions::clock) when it was started
  std::optional<ExitStatus> status;  // set once reaped
  int exit_order = -1;               // 0 for the first node reaped, 1 next, ...
  bool stopped_by_us = false;        // signalled by stop_all() before it exited
  bool tolerated = false;            // its failure is one the job goes on without (tolerate())
  std::deque<std::string> stderr_tail;
};

struct SupervisorOptions {
  std::filesystem::path log_dir;
  bool echo = true;  // copy lines to echo_to, each with one prefix
  std::FILE* echo_to = stdout;
  std::size_t tail_lines = 5;
  JobClock clock = JobClock::from_environment();  // the time of a line without a prefix
  std::function<void()> before_echo;              // if set, called before a line is echoed
  // If set, called with each line a node writes and the node's name (the live status reads some).
  std::function<void(const std::string& node, std::string_view line)> on_line;
  bool append_logs = false;                       // resume: add to the logs instead of starting them anew
};

class Supervisor {
 public:
  using Clock = std::chrono::steady_clock;
  // kWriteFailure: a node's log could not be written (a full disk): every
  // line is written and flushed as it comes, and the first failed write
  // ends run_until(); write_failure() says which file and why.
  enum class Event { kCondition, kFailure, kSignal, kDeadline, kWriteFailure };
  struct Outcome {
    Event event = Event::kCondition;
    int signal = 0;         // kSignal: which
    std::size_t node = 0;   // kFailure, kWriteFailure: index of the node
  };

  Supervisor(SupervisorOptions options, SignalWatch& signals);
  ~Supervisor();  // SIGKILLs and reaps any node still running
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // Opens the node's log (truncating it) and starts it; returns its index.
  std::size_t start(const NodeSpec& spec);

  // The failure of node `index` does not end run_until() any more (a worker
  // the job's failure policy goes on without).
  void tolerate(std::size_t index);

  // SIGKILL to node `index`'s process group if it is still running (not yet
  // reaped, so its pid cannot have been reused); returns whether it was.
  // Its exit is then reaped as any other (a failure unless tolerated).
  bool kill_node(std::size_t index);

  // Pumps output and reaps exits until SIGINT/SIGTERM arrives, a node fails
  // (unless `stop_on_failure` is false), a log cannot be written, `condition()` holds (checked after
  // every wake-up, at least every `tick`), or `deadline` passes, in that
  // order of precedence.
  Outcome run_until(const std::function<bool()>& condition, std::optional<Clock::time_point> deadline,
                    std::chrono::milliseconds tick, bool stop_on_failure = true);

  // SIGTERM to every running node's process group, SIGKILL to those left
  // after `grace` (at once if SIGINT/SIGTERM arrives meanwhile); returns
  // when all are reaped, or at most max(grace, 5 s) after the SIGKILL.
  void stop_all(std::chrono::milliseconds grace);

  // "cannot write LOG: <reason>" once a node's log failed (that log is
  // closed, its later lines only echoed); empty otherwise.
  const std::string& write_failure() const { return write_failure_; }

  bool all_exited() const;
  bool exited(std::size_t node) const;
  std::vector<NodeState> states() const;
  // One line per started node: "<log_stem> <pid>".
  std::string pids_text() const;

 private:
  struct Node;
  struct Stream;

  void wait_once(std::chrono::milliseconds timeout);
  // Reads what is there; true if the stream may have more right now.
  bool read_stream(Stream& stream);
  void on_line(Node& node, bool is_stderr, std::string_view line);
  void reap();
  void mark_exited(Node& node, int wait_status);
  std::optional<std::size_t> first_failure() const;
  void signal_running(int signal);
  void wait_all_exited(std::chrono::milliseconds limit, bool escalate_on_signal);
  void flush();

  SupervisorOptions options_;
  SignalWatch& signals_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::optional<int> pending_signal_;
  int exits_ = 0;
  std::string write_failure_;
  std::size_t write_failure_node_ = 0;
  bool write_failure_reported_ = false;
};

}  // namespace pstrain::launcher
