#include "tools/launcher/metrics_tail.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <exception>
#include <limits>
#include <stdexcept>

#include "tools/report/json_value.h"

namespace pstrain::launcher {
namespace {


// A number, with JSON null standing for NaN (as the writers do for non-finite values).
double number_or_nan(const report::JsonValue& record, std::string_view key) {
  const report::JsonValue* v = record.find(key);
  if (v == nullptr || v->is_null()) return std::numeric_limits<double>::quiet_NaN();
  return v->as_number(key);
}

std::int64_t integer(const report::JsonValue& record, std::string_view key) {
  const report::JsonValue* v = record.find(key);
  if (v == nullptr) throw std::runtime_error("missing key");
  return v->as_integer(key);
}

}  // namespace

void WorkerProgress::add_history_line(std::string_view line) {
  try {
    const report::JsonValue record = report::parse_json(line, "metrics");
    const report::JsonValue* type = record.find("type");
    if (type == nullptr || type->as_string("type") != "plan") return;
    total_steps_ = integer(record, "total_steps");
    epochs_ = integer(record, "epochs");
    if (const report::JsonValue* workers = record.find("workers")) workers_ = workers->as_integer("workers");
    const report::JsonValue* reason = record.find("reason");
    workers_reason_ = reason != nullptr ? reason->as_string("reason") : std::string();
  } catch (const std::exception&) {
    ++bad_lines_;
  }
}

void WorkerProgress::add_line(std::string_view line, double read_s) {
  if (line.empty()) return;
  try {
    const report::JsonValue record = report::parse_json(line, "metrics");
    const report::JsonValue* type = record.find("type");
    if (type == nullptr) throw std::runtime_error("no type");
    const std::string& kind = type->as_string("type");
    if (kind == "plan") {
      total_steps_ = integer(record, "total_steps");
      epochs_ = integer(record, "epochs");
      if (const report::JsonValue* workers = record.find("workers")) workers_ = workers->as_integer("workers");
      const report::JsonValue* reason = record.find("reason");
      workers_reason_ = reason != nullptr ? reason->as_string("reason") : std::string();
    } else if (kind == "step") {
      const double time_s = number_or_nan(record, "time_s");
      if (!std::isfinite(time_s)) throw std::runtime_error("no time");
      const double loss = number_or_nan(record, "loss");
      window_.add(time_s, integer(record, "step") + 1, loss, number_or_nan(record, "staleness"));
      if (const report::JsonValue* epoch = record.find("epoch")) epoch_ = epoch->as_integer("epoch");
      if (std::isfinite(loss)) loss_ema_ = loss_ema_ ? *loss_ema_ + kLossWeight * (loss - *loss_ema_) : loss;
      const double offset = read_s - time_s;
      if (!have_offset_ || offset < offset_s_) offset_s_ = offset;
      have_offset_ = true;
    } else if (kind == "eval") {
      const double accuracy = number_or_nan(record, "test_accuracy");
      if (std::isfinite(accuracy)) test_accuracy_ = accuracy;
    } else if (kind == "rejoin") {
      ++rejoins_;
    } else if (kind == "resume") {
      resumed_steps_ = integer(record, "step");
    } else if (kind == "end") {
      end_steps_ = integer(record, "steps");
      const report::JsonValue* retired = record.find("retired");
      retired_ = retired != nullptr && retired->as_bool("retired");
    }
  } catch (const std::exception&) {
    ++bad_lines_;  // the status line is a view: a bad record must not stop the run
  }
}

WorkerStatus WorkerProgress::status(double now_s) const {
  WorkerStatus s;
  s.rank = rank_;
  s.total_steps = total_steps_;
  s.steps_done = end_steps_ >= 0 ? end_steps_ : std::max(window_.steps_done(), resumed_steps_);
  s.finished = end_steps_ >= 0;
  s.retired = retired_;
  s.epoch = epoch_;
  s.epochs = epochs_;
  s.workers = workers_;
  s.workers_reason = workers_reason_;
  s.test_accuracy = test_accuracy_;
  const double now_w = now_s - offset_s_;  // now on the worker's clock
  if (have_offset_) {
    s.steps_per_s = window_.rate(now_w);
    s.loss = loss_ema_;
    s.staleness = window_.mean_staleness(now_w);
  }
  return s;
}

}  // namespace pstrain::launcher
