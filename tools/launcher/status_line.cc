#include "tools/launcher/status_line.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/base/log.h"

namespace pstrain::launcher {
namespace {

std::string fixed(double x, int decimals) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, x);
  return buf;
}

// The head: everything but the per-worker parts.
std::string head_text(const StatusSnapshot& s) {
  if (s.workers.empty()) return "no workers";
  const auto slowest = std::min_element(s.workers.begin(), s.workers.end(), [](const auto& a, const auto& b) {
    return a.steps_done < b.steps_done;
  });
  std::int64_t total = -1;
  double loss_sum = 0, stale_sum = 0;
  int losses = 0, stales = 0, done = 0;
  std::optional<double> min_rate;
  for (const WorkerStatus& w : s.workers) {
    total = std::max(total, w.total_steps);
    if (w.loss) loss_sum += *w.loss, ++losses;
    if (w.staleness) stale_sum += *w.staleness, ++stales;
    if (w.finished) ++done;
    if (!w.finished && w.steps_per_s) min_rate = std::min(min_rate.value_or(*w.steps_per_s), *w.steps_per_s);
  }
  std::string out;
  if (done == static_cast<int>(s.workers.size())) {
    out = "done: " + std::to_string(slowest->steps_done) + " steps";
  } else if (total < 0 && slowest->steps_done == 0) {
    out = "starting";
  } else {
    out = "step " + std::to_string(slowest->steps_done);
    if (total > 0) {
      out += "/" + std::to_string(total) + " " +
             fixed(100.0 * static_cast<double>(slowest->steps_done) / static_cast<double>(total), 0) + "%";
    }
  }
  if (done < static_cast<int>(s.workers.size())) {
    out += " | " + (min_rate ? fixed(*min_rate, 1) : std::string("-")) + " steps/s";
  }
  if (losses > 0) out += " | loss " + fixed(loss_sum / losses, 4);
  if (done < static_cast<int>(s.workers.size())) {
    const auto eta = eta_s(s);
    out += " | ETA " + (eta ? duration_text(*eta) : std::string("-"));
  }
  if (s.async && stales > 0) out += " | staleness " + fixed(stale_sum / stales, 2);
  return out;
}

std::string worker_text(const WorkerStatus& w) {
  std::string out = "w";
  out += std::to_string(w.rank);
  out += ' ';
  if (w.finished) return out.append("done");
  out += std::to_string(w.steps_done);
  if (w.steps_per_s) out.append(" ").append(fixed(*w.steps_per_s, 1)).append("/s");
  return out;
}

}  // namespace

std::optional<double> eta_s(const StatusSnapshot& s) {
  double longest = 0;
  for (const WorkerStatus& w : s.workers) {
    if (w.finished) continue;
    if (w.total_steps < 0 || !w.steps_per_s || *w.steps_per_s <= 0) return std::nullopt;
    const auto left = static_cast<double>(std::max<std::int64_t>(w.total_steps - w.steps_done, 0));
    longest = std::max(longest, left / *w.steps_per_s);
  }
  return longest;
}

std::string duration_text(double seconds) {
  const auto total = static_cast<long long>(std::llround(std::max(seconds, 0.0)));
  char buf[48];
  if (total < 60) {
    std::snprintf(buf, sizeof(buf), "%llds", total);
  } else if (total < 3600) {
    std::snprintf(buf, sizeof(buf), "%lldm%02llds", total / 60, total % 60);
  } else {
    std::snprintf(buf, sizeof(buf), "%lldh%02lldm", total / 3600, (total % 3600) / 60);
  }
  return buf;
}

std::string status_text(const StatusSnapshot& s) {
  std::string out = head_text(s);
  for (const WorkerStatus& w : s.workers) out += " | " + worker_text(w);
  return out;
}

std::string render_plain(const StatusSnapshot& s) { return log_prefix(s.elapsed_s, "status") + status_text(s); }

std::string render_terminal(const StatusSnapshot& s, std::size_t width) {
  const std::size_t fit = width > 1 ? width - 1 : 0;
  const std::string prefix = log_prefix(s.elapsed_s, "status");
  std::string line = prefix + head_text(s);
  // As many workers as fit, leaving room for the "| +N more" that says how many did not.
  for (std::size_t i = 0; i < s.workers.size(); ++i) {
    const std::string part = " | " + worker_text(s.workers[i]);
    const std::size_t left_after = s.workers.size() - i - 1;
    const std::string more = left_after > 0 ? " | +" + std::to_string(left_after) + " more" : "";
    const std::string more_if_cut = " | +" + std::to_string(s.workers.size() - i) + " more";
    if (line.size() + part.size() + more.size() <= fit || (left_after == 0 && line.size() + part.size() <= fit)) {
      line += part;
      continue;
    }
    if (line.size() + more_if_cut.size() <= fit) line += more_if_cut;
    break;
  }
  if (line.size() > fit) line = fit >= 3 ? line.substr(0, fit - 3) + "..." : line.substr(0, fit);
  return line;
}

void StepWindow::add(double time_s, std::int64_t steps_done, double loss, double staleness) {
  records_.push_back({time_s, steps_done, loss, staleness});
  // Keep the newest record at or before (newest - window) as the base, drop older ones.
  while (records_.size() >= 2 && records_[1].time_s <= time_s - window_s_) records_.pop_front();
}

std::optional<double> StepWindow::rate(double now) const {
  if (records_.size() < 2) return std::nullopt;
  const Record* base = &records_.front();
  for (const Record& r : records_) {
    if (r.time_s > now - window_s_) break;
    base = &r;
  }
  const double dt = now - base->time_s;
  if (dt <= 0) return std::nullopt;
  return static_cast<double>(records_.back().steps_done - base->steps_done) / dt;
}

std::optional<double> StepWindow::mean_of(double now, double Record::*field) const {
  double sum = 0;
  int n = 0;
  for (const Record& r : records_) {
    if (r.time_s <= now - window_s_ || !std::isfinite(r.*field)) continue;
    sum += r.*field;
    ++n;
  }
  if (n > 0) return sum / n;
  for (auto it = records_.rbegin(); it != records_.rend(); ++it) {
    if (std::isfinite((*it).*field)) return (*it).*field;
  }
  return std::nullopt;
}

std::optional<double> StepWindow::mean_loss(double now) const { return mean_of(now, &Record::loss); }
std::optional<double> StepWindow::mean_staleness(double now) const { return mean_of(now, &Record::staleness); }

}  // namespace pstrain::launcher
