#include "tools/launcher/live_status.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "tools/report/metrics.h"
#include "tools/report/scheduler_records.h"

namespace pstrain::launcher {

LiveStatus::LiveStatus(LiveStatusOptions options)
    : options_(std::move(options)), scheduler_records_(report::scheduler_records_file(options_.run_dir)) {
  if (options_.resume) scheduler_records_.skip_existing();  // about the interrupted run's processes
  for (int w = 0; w < options_.num_workers; ++w) {
    tails_.emplace_back(report::worker_metrics_path(options_.run_dir, w));
    workers_.emplace_back(w, options_.window_s);
    if (options_.resume) {
      for (const std::string& line : tails_.back().read_lines()) workers_.back().add_history_line(line);
    }
  }
  states_.assign(workers_.size(), WorkerStatus::State::kLive);
  rejoins_at_restart_.assign(workers_.size(), 0);
  tracked_at_s_.assign(workers_.size(), 0.0);
  next_line_s_ = options_.clock.now_s() + options_.interval_s;
}

void LiveStatus::poll() {
  const double now = options_.clock.now_s();
  for (std::size_t w = 0; w < tails_.size(); ++w) {
    for (const std::string& line : tails_[w].read_lines()) workers_[w].add_line(line, now);
  }
  for (const std::string& line : scheduler_records_.read_lines()) take_scheduler_record(line);
}

// An abandoned join: its slot (tracked, also a joiner started by hand) shows
// it, unless a later process was started into the slot since.
void LiveStatus::take_scheduler_record(const std::string& line) {
  std::vector<report::AbandonedJoinRecord> joins;
  try {
    report::parse_scheduler_record(line, "scheduler record", joins);
  } catch (const std::exception&) {
    return;  // not one to show (the summary names a malformed line)
  }
  for (const report::AbandonedJoinRecord& j : joins) {
    track_worker(j.rank);
    const auto r = static_cast<std::size_t>(j.rank);
    if (j.time_s >= tracked_at_s_[r]) states_[r] = WorkerStatus::State::kAbandoned;
  }
}

StatusSnapshot LiveStatus::snapshot() const {
  StatusSnapshot s;
  s.elapsed_s = options_.clock.now_s();
  s.async = options_.async;
  for (std::size_t w = 0; w < workers_.size(); ++w) {
    s.workers.push_back(workers_[w].status(s.elapsed_s));
    s.workers.back().state = states_[w];
    if (states_[w] == WorkerStatus::State::kRestarting && workers_[w].rejoins() > rejoins_at_restart_[w]) {
      s.workers.back().state = WorkerStatus::State::kLive;  // its new process rejoined
    }
  }
  s.phase = phase_;
  s.checkpoint_step = checkpoint_step_;
  s.ending = ending_;
  return s;
}

void LiveStatus::set_worker_state(int rank, WorkerStatus::State state) {
  if (rank < 0 || static_cast<std::size_t>(rank) >= states_.size()) return;
  poll();  // a "rejoin" record already written belongs to an earlier restart
  auto& now = states_[static_cast<std::size_t>(rank)];
  // A joiner's exit (dropped, to the launcher) whose join the scheduler abandoned already says so.
  if (!(now == WorkerStatus::State::kAbandoned && state == WorkerStatus::State::kDropped)) now = state;
  rejoins_at_restart_[static_cast<std::size_t>(rank)] = workers_[static_cast<std::size_t>(rank)].rejoins();
}

void LiveStatus::track_worker(int rank) {
  if (rank < 0) return;
  for (auto w = static_cast<int>(workers_.size()); w <= rank; ++w) {
    tails_.emplace_back(report::worker_metrics_path(options_.run_dir, w));
    workers_.emplace_back(w, options_.window_s);
    states_.push_back(WorkerStatus::State::kLive);
    rejoins_at_restart_.push_back(0);
    tracked_at_s_.push_back(0.0);  // no process started into it by this launcher yet
  }
}

void LiveStatus::start_joiner(int rank) {
  track_worker(rank);
  if (rank < 0) return;
  const auto r = static_cast<std::size_t>(rank);
  tracked_at_s_[r] = options_.clock.now_s();
  if (states_[r] == WorkerStatus::State::kAbandoned) states_[r] = WorkerStatus::State::kLive;
}

bool LiveStatus::retired(int rank) {
  if (rank < 0 || static_cast<std::size_t>(rank) >= workers_.size()) return false;
  poll();
  const WorkerStatus w = workers_[static_cast<std::size_t>(rank)].status(options_.clock.now_s());
  return w.finished && w.retired;
}

void LiveStatus::node_line(const std::string& node, std::string_view line) {
  if (node == "scheduler") {
    static constexpr std::string_view kRoster = "; registered ";  // "...; registered 2/2 servers and 1/2 workers"
    if (const auto at = line.find(kRoster); at != std::string_view::npos) {
      std::string roster(line.substr(at + kRoster.size()));
      if (const auto and_at = roster.find(" servers and "); and_at != std::string::npos) {
        roster.replace(and_at, 13, " servers ");
      }
      phase_ = "registering " + roster;
    } else if (line.find("rendezvous complete") != std::string_view::npos) {
      phase_.clear();
    }
    return;
  }
  static constexpr std::string_view kCheckpoint = "checkpoint step-";  // "checkpoint step-00000040: wrote ..."
  const auto at = line.find(kCheckpoint);
  if (at == std::string_view::npos || line.find(": wrote", at) == std::string_view::npos) return;
  std::int64_t step = 0;
  std::size_t digits = 0;
  for (std::size_t i = at + kCheckpoint.size(); i < line.size() && line[i] >= '0' && line[i] <= '9'; ++i, ++digits) {
    step = step * 10 + (line[i] - '0');
  }
  if (digits > 0 && digits < 18) checkpoint_step_ = std::max(checkpoint_step_.value_or(0), step);
}

std::size_t LiveStatus::width() const {
  winsize ws{};
  if (ioctl(fileno(options_.out), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  if (const char* columns = std::getenv("COLUMNS")) {
    const long n = std::strtol(columns, nullptr, 10);
    if (n > 0) return static_cast<std::size_t>(n);
  }
  return 80;
}

void LiveStatus::write(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), options_.out);
  std::fflush(options_.out);
}

void LiveStatus::tick() {
  if (!enabled() || finished_) return;
  const double now = options_.clock.now_s();
  if (options_.terminal) {
    if (now >= next_poll_s_) {
      poll();
      last_ = render_terminal(snapshot(), width());
      next_poll_s_ = now + options_.redraw_s;
      write(std::string("\r\033[K") + last_);
      drawn_ = true;
    } else if (!drawn_ && !last_.empty()) {
      write(last_);  // hidden for other output: draw it again below that
      drawn_ = true;
    }
    return;
  }
  if (now >= next_poll_s_) {
    poll();
    next_poll_s_ = now + options_.redraw_s;
  }
  if (now >= next_line_s_) {
    write(render_plain(snapshot()) + "\n");
    next_line_s_ = now + options_.interval_s;
  }
}

void LiveStatus::hide() {
  if (!drawn_) return;
  write("\r\033[K");
  drawn_ = false;
}

void LiveStatus::finish(const std::string& ending) {
  if (!enabled() || finished_) return;
  hide();
  poll();
  finished_ = true;
  ending_ = ending;
  const StatusSnapshot s = snapshot();
  write((options_.terminal ? render_terminal(s, width()) : render_plain(s)) + "\n");
}

}  // namespace pstrain::launcher
