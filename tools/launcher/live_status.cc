#include "tools/launcher/live_status.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdlib>

#include "tools/report/metrics.h"

namespace pstrain::launcher {

LiveStatus::LiveStatus(LiveStatusOptions options) : options_(std::move(options)) {
  for (int w = 0; w < options_.num_workers; ++w) {
    tails_.emplace_back(report::worker_metrics_path(options_.run_dir, w));
    workers_.emplace_back(w, options_.window_s);
  }
  next_line_s_ = options_.clock.now_s() + options_.interval_s;
}

void LiveStatus::poll() {
  const double now = options_.clock.now_s();
  for (std::size_t w = 0; w < tails_.size(); ++w) {
    for (const std::string& line : tails_[w].read_lines()) workers_[w].add_line(line, now);
  }
}

StatusSnapshot LiveStatus::snapshot() const {
  StatusSnapshot s;
  s.elapsed_s = options_.clock.now_s();
  s.async = options_.async;
  for (const WorkerProgress& w : workers_) s.workers.push_back(w.status(s.elapsed_s));
  return s;
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

void LiveStatus::finish() {
  if (!enabled() || finished_) return;
  hide();
  poll();
  finished_ = true;
  const StatusSnapshot s = snapshot();
  write((options_.terminal ? render_terminal(s, width()) : render_plain(s)) + "\n");
}

}  // namespace pstrain::launcher
