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

// In the job: live, and not retired by a membership change (whose steps stop at its boundary).
bool live(const WorkerStatus& w) { return w.state == WorkerStatus::State::kLive && !(w.finished && w.retired); }

// What the head is made of: the live workers (all, if none is live).
struct HeadFacts {
  const WorkerStatus* slowest = nullptr;
  std::int64_t total = -1;
  double loss_sum = 0, stale_sum = 0;
  int losses = 0, stales = 0, done = 0, counted = 0;
  std::optional<double> min_rate;
  std::optional<double> accuracy;  // the lowest rank's that has one
};

HeadFacts head_facts(const StatusSnapshot& s) {
  bool any_live = false;
  for (const WorkerStatus& w : s.workers) any_live = any_live || live(w);
  HeadFacts f;
  for (const WorkerStatus& w : s.workers) {
    if (!f.accuracy && w.test_accuracy) f.accuracy = w.test_accuracy;
    if (any_live && !live(w)) continue;
    ++f.counted;
    if (f.slowest == nullptr || w.steps_done < f.slowest->steps_done) f.slowest = &w;
    f.total = std::max(f.total, w.total_steps);
    if (w.loss) f.loss_sum += *w.loss, ++f.losses;
    if (w.staleness) f.stale_sum += *w.staleness, ++f.stales;
    if (w.finished) ++f.done;
    if (!w.finished && w.steps_per_s) f.min_rate = std::min(f.min_rate.value_or(*w.steps_per_s), *w.steps_per_s);
  }
  return f;
}

// "step 340/1000 34%" (+ " evaluating"), "done: 1000 steps", the phase or "starting".
std::string progress_text(const StatusSnapshot& s, const HeadFacts& f) {
  const WorkerStatus& slowest = *f.slowest;
  if (f.done == f.counted) return "done: " + std::to_string(slowest.steps_done) + " steps";
  if (f.total < 0 && slowest.steps_done == 0) {
    if (s.ending) return "step 0";
    return s.phase.empty() ? "starting" : s.phase;
  }
  std::string out = "step " + std::to_string(slowest.steps_done);
  if (f.total > 0) {
    out.append("/").append(std::to_string(f.total)).append(" ");
    out.append(fixed(100.0 * static_cast<double>(slowest.steps_done) / static_cast<double>(f.total), 0)).append("%");
  }
  if (!s.ending && f.total > 0 && slowest.steps_done >= f.total) out += " evaluating";
  if (slowest.epoch >= 0 && slowest.epochs > 0) {
    out += " | epoch " + std::to_string(slowest.epoch + 1) + "/" + std::to_string(slowest.epochs);
  }
  return out;
}

// The head: everything but the per-worker parts.
std::string head_text(const StatusSnapshot& s) {
  if (s.workers.empty()) return "no workers";
  const HeadFacts f = head_facts(s);
  const bool running = !s.ending && f.done < f.counted;
  std::string out;
  if (s.ending && !s.ending->empty()) out = "done (" + *s.ending + "): ";
  out += progress_text(s, f);
  if (running) out += " | " + (f.min_rate ? fixed(*f.min_rate, 1) : std::string("-")) + " steps/s";
  if (f.losses > 0) out += " | loss " + fixed(f.loss_sum / f.losses, 4);
  if (f.accuracy) out += " | acc " + fixed(100.0 * *f.accuracy, 2) + "%";
  if (running) {
    const auto eta = eta_s(s);
    out += " | ETA " + (eta ? duration_text(*eta) : std::string("-"));
  }
  for (const WorkerStatus& w : s.workers) {  // the membership as the first live worker saw it change
    if (!live(w) || w.workers < 0) continue;
    out += " | " + std::to_string(w.workers) + " workers" + (w.workers_reason.empty() ? "" : " (" + w.workers_reason + ")");
    break;
  }
  if (s.async && f.stales > 0) out += " | staleness " + fixed(f.stale_sum / f.stales, 2);
  if (s.checkpoint_step) out += " | checkpoint step " + std::to_string(*s.checkpoint_step);
  return out;
}

std::string worker_text(const WorkerStatus& w) {
  std::string out = "w";
  out += std::to_string(w.rank);
  out += ' ';
  if (w.state == WorkerStatus::State::kDropped) return out.append("dropped");
  if (w.state == WorkerStatus::State::kRestarting) return out.append("restarting");
  if (w.state == WorkerStatus::State::kAbandoned) return out.append("join abandoned");
  if (w.finished) return out.append(w.retired ? "retired" : "done");
  out += std::to_string(w.steps_done);
  if (w.steps_per_s) out.append(" ").append(fixed(*w.steps_per_s, 1)).append("/s");
  return out;
}

}  // namespace

std::optional<double> eta_s(const StatusSnapshot& s) {
  double longest = 0;
  for (const WorkerStatus& w : s.workers) {
    if (w.finished || !live(w)) continue;
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
