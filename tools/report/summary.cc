#include "tools/report/summary.h"

#include <algorithm>
#include <array>
#include <fstream>
#include <iterator>
#include <limits>

#include "common/base/errors.h"
#include "tools/report/json_text.h"
#include "tools/report/json_value.h"
#include "tools/report/text_file.h"

namespace pstrain::report {
namespace {

struct Threshold {
  const char* name;
  double value;
};
constexpr std::array<Threshold, 3> kThresholds{{{"0.80", 0.80}, {"0.85", 0.85}, {"0.90", 0.90}}};
// Accuracies are written with 9 significant digits, so 0.8 may read back as
// 0.799999999; a test set would need 10^8 samples for this to matter.
constexpr double kAccuracySlack = 1e-8;

void add_step(WorkerSummary& s, const StepRecord& r) {
  s.images += r.batch;
  s.compute_s += r.compute_ms / 1e3;
  s.pull_s += r.pull_ms / 1e3;
  s.push_s += r.push_ms / 1e3;
  s.skipped_steps += r.skipped ? 1 : 0;
}

std::int64_t steps_done(const WorkerMetrics& w) { return w.steps.empty() ? 0 : w.steps.back().step + 1; }

// A worker without an "end" record: what its step records say. `dropped`:
// the job went on without it; else the run ended before it finished.
WorkerSummary unfinished_worker_summary(const WorkerMetrics& w, bool dropped) {
  WorkerSummary s;
  s.rank = w.rank;
  s.dropped = dropped;
  s.status = dropped ? "dropped" : "interrupted";
  s.steps_done = steps_done(w);
  for (const StepRecord& r : w.steps) {
    s.time_s = r.time_s;
    add_step(s, r);
  }
  s.images_per_s = s.time_s > 0 ? static_cast<double>(s.images) / s.time_s : std::numeric_limits<double>::quiet_NaN();
  return s;
}

// In a partial run (the job was interrupted), a worker without its end record
// may have been dropped long before: another worker's plan records re-split the
// data among fewer workers from an epoch after its last step.
bool dropped_before_the_end(const WorkerMetrics& w, const RunMetrics& metrics, std::int64_t workers) {
  if (w.steps.empty()) return false;
  const std::int64_t last_epoch = w.steps.back().epoch;
  for (const WorkerMetrics& other : metrics.workers) {
    if (other.rank == w.rank) continue;
    std::int64_t current = workers;
    for (const PlanChange& p : other.plan_changes) {
      if (p.step < 0 && p.workers < current && p.epoch > last_epoch) return true;
      current = p.workers;
    }
  }
  return false;
}

WorkerSummary worker_summary(const WorkerMetrics& w) {
  if (!w.end) throw DataError("worker " + std::to_string(w.rank) + " has no \"end\" record");
  const EndRecord& e = *w.end;
  WorkerSummary s;
  s.rank = w.rank;
  s.time_s = e.time_s;
  s.images = e.images;
  s.compute_s = e.compute_s;
  s.pull_s = e.pull_s;
  s.push_s = e.push_s;
  s.blocked_s = e.blocked_s;
  s.skipped_steps = e.skipped_steps;
  s.steps_done = steps_done(w);
  if (e.retired) s.status = "retired";  // left at a membership change (elastic shrink)
  // A rank taken back by a new process: the end record counts that process's
  // work, the step records before its rejoin record its predecessors'. (Their
  // time blocked by the consistency policy is not in step records: lost.)
  if (!w.rejoins.empty()) {
    // Its last process left at once, its rank retired while it was down: retired, its predecessors' work counted.
    if (w.rejoins.back().retired_by_change == 0) s.status = "restarted";
    const std::size_t before = std::min(w.rejoins.back().steps_before, w.steps.size());
    for (std::size_t i = 0; i < before; ++i) add_step(s, w.steps[i]);
  }
  s.images_per_s = s.time_s > 0 ? static_cast<double>(s.images) / s.time_s : std::numeric_limits<double>::quiet_NaN();
  return s;
}

void add_evaluations(RunSummary& s, const std::vector<EvalRecord>& evals) {
  if (!evals.empty()) s.final_test_accuracy = evals.back().test_accuracy;
  for (const Threshold& t : kThresholds) {
    AccuracyTime at{t.name, std::nullopt};
    for (const EvalRecord& e : evals) {
      if (e.test_accuracy >= t.value - kAccuracySlack) {
        at.time_s = e.time_s;
        break;
      }
    }
    s.time_to_accuracy.push_back(at);
  }
}

StalenessSummary staleness_summary(const std::vector<ServerMetrics>& servers) {
  StalenessSummary st;
  for (const ServerMetrics& server : servers) {
    for (const auto& [staleness, count] : server.staleness_histogram) st.histogram[staleness] += count;
  }
  double weighted = 0;
  std::int64_t total = 0;
  for (const auto& [staleness, count] : st.histogram) {
    if (count <= 0) continue;
    weighted += static_cast<double>(staleness) * static_cast<double>(count);
    total += count;
    st.max = staleness;  // the map is ordered: the last counted key is the largest
  }
  if (total > 0) st.mean = weighted / static_cast<double>(total);
  return st;
}

std::string time_to_accuracy_json(const RunSummary& s) {
  std::string out = "{";
  for (const AccuracyTime& at : s.time_to_accuracy) {
    if (out.size() > 1) out += ", ";
    out += json_quote(at.threshold) + ": " + json_number(at.time_s);
  }
  return out + "}";
}

std::string worker_json(const WorkerSummary& w) {
  return "{\"rank\": " + std::to_string(w.rank) + ", \"time_s\": " + json_number(w.time_s) +
         ", \"images\": " + json_number(w.images) + ", \"compute_s\": " + json_number(w.compute_s) +
         ", \"pull_s\": " + json_number(w.pull_s) + ", \"push_s\": " + json_number(w.push_s) +
         ", \"blocked_s\": " + json_number(w.blocked_s) + ", \"images_per_s\": " + json_number(w.images_per_s) +
         ", \"skipped_steps\": " + std::to_string(w.skipped_steps) +
         ", \"steps_done\": " + std::to_string(w.steps_done) + ", \"dropped\": " + (w.dropped ? "true" : "false") +
         ", \"status\": " + json_quote(w.status) + "}";
}

// [{"server": 1, "from_step": 20, "lost_updates": 12, "lost_pushes": 1}, ...]
std::string server_restarts_json(const RunSummary& s) {
  std::string out;
  for (const RunSummary::ServerRestart& r : s.server_restarts) {
    out += std::string(out.empty() ? "" : ", ") + "{\"server\": " + std::to_string(r.rank) +
           ", \"from_step\": " + std::to_string(r.from_step) + ", \"lost_updates\": " + std::to_string(r.lost_updates) +
           ", \"lost_pushes\": " + std::to_string(r.lost_pushes) + "}";
  }
  return "[" + out + "]";
}

std::string restarts_json(const std::vector<RestartSummary>& restarts) {
  std::string out;
  for (const RestartSummary& r : restarts) {
    out += (out.empty() ? "" : ", ") + ("{\"rank\": " + std::to_string(r.rank) + ", \"time_s\": " + json_number(r.time_s) +
                                        ", \"step\": " + (r.step >= 0 ? std::to_string(r.step) : std::string("null")) +
                                        (r.retired_by_change != 0
                                             ? ", \"retired_by_change\": " + std::to_string(r.retired_by_change)
                                             : std::string()) +
                                        "}");
  }
  return "[" + out + "]";
}

// [{"epoch": 1, "step": 16, "old_workers": 3, "new_workers": 2, "reason": "drop"}, ...]
std::string membership_changes_json(const std::vector<MembershipChangeSummary>& changes) {
  std::string out;
  for (const MembershipChangeSummary& c : changes) {
    out += (out.empty() ? "" : ", ") + ("{\"epoch\": " + std::to_string(c.epoch) + ", \"step\": " +
                                        (c.step >= 0 ? std::to_string(c.step) : std::string("null")) +
                                        ", \"old_workers\": " + std::to_string(c.old_workers) +
                                        ", \"new_workers\": " + std::to_string(c.new_workers) +
                                        ", \"reason\": " + json_quote(c.reason) + "}");
  }
  return "[" + out + "]";
}

// [{"rank": 2, "time_s": 12.5, "change": 1, "reason": "worker 2 (...) was killed by signal 9 ..."}, ...]
std::string abandoned_joins_json(const std::vector<AbandonedJoinRecord>& joins) {
  std::string out;
  for (const AbandonedJoinRecord& j : joins) {
    out += (out.empty() ? "" : ", ") + ("{\"rank\": " + std::to_string(j.rank) + ", \"time_s\": " + json_number(j.time_s) +
                                        ", \"change\": " + (j.change >= 0 ? std::to_string(j.change) : std::string("null")) +
                                        ", \"reason\": " + json_quote(j.reason) + "}");
  }
  return "[" + out + "]";
}

// The changes of the workers sharing the training set, as the lowest worker
// that finished saw them (else the lowest): its later "plan" records.
std::vector<MembershipChangeSummary> membership_changes(int workers, const RunMetrics& metrics) {
  const WorkerMetrics* seen = nullptr;
  for (const WorkerMetrics& w : metrics.workers) {
    if (seen == nullptr || (w.end && !seen->end)) seen = &w;
  }
  std::vector<MembershipChangeSummary> out;
  if (seen == nullptr) return out;
  std::int64_t current = workers;
  for (const PlanChange& p : seen->plan_changes) {
    if (p.workers == current) continue;  // the same members again (a rejoined process's re-plan)
    MembershipChangeSummary c{p.epoch, p.step, current, p.workers, ""};
    const bool within = p.step >= 0;
    c.reason = p.workers < current ? (within ? "retire" : "drop") : (within ? "join" : "rejoin");
    if (within && !p.reason.empty()) c.reason = p.reason;  // the scheduler's: "ctl" for a requested grow
    if (!within) {
      for (const StepRecord& r : seen->steps) {
        if (r.epoch == p.epoch && (c.step < 0 || r.step < c.step)) c.step = r.step;
      }
    }
    out.push_back(c);
    current = p.workers;
  }
  return out;
}

template <class Int>
std::string int_list_json(const std::vector<Int>& values) {
  std::string out = "[";
  for (const Int v : values) out += (out.size() > 1 ? ", " : "") + std::to_string(v);
  return out + "]";
}

std::string ssp_json(const std::optional<SspSummary>& ssp) {
  if (!ssp) return "null";
  return "{\"staleness_bound\": " + std::to_string(ssp->staleness_bound) +
         ", \"clock_gap_max\": " + json_number(ssp->clock_gap_max) +
         ", \"blocked_s_mean\": " + json_number(ssp->blocked_s_mean) + "}";
}

std::string staleness_json(const std::optional<StalenessSummary>& st) {
  if (!st) return "null";
  std::string hist = "{";
  for (const auto& [staleness, count] : st->histogram) {
    if (hist.size() > 1) hist += ", ";
    hist += json_quote(std::to_string(staleness)) + ": " + json_number(count);
  }
  hist += "}";
  const std::string max = st->max ? json_number(*st->max) : "null";
  return "{\"mean\": " + json_number(st->mean) + ", \"max\": " + max + ", \"histogram\": " + hist + "}";
}

std::string resources_json(const RunSummary& s) {
  std::string items;
  for (const ResourceSummary& r : s.resources) items += (items.empty() ? "\n    " : ",\n    ") + resource_summary_json(r);
  return "[" + items + (items.empty() ? "]" : "\n  ]");
}

std::string warnings_json(const RunSummary& s) {
  std::string items;
  for (const std::string& w : s.warnings) items += (items.empty() ? "" : ", ") + json_quote(w);
  return "[" + items + "]";
}

std::string compute_json(const std::optional<ComputeRecord>& c) {
  if (!c) return "null";
  return "{\"backend\": " + json_quote(c->backend) + ", \"conv_path\": " + json_quote(c->conv_path) +
         ", \"conv_detail\": " + json_quote(c->conv_detail) + ", \"precision\": " + json_quote(c->precision) + "}";
}

}  // namespace

RunSummary summarize(const RunConfig& config, const RunMetrics& metrics, const PartialRun* partial) {
  RunSummary s;
  if (partial != nullptr) {
    s.partial = true;
    s.partial_reason = partial->reason;
  }
  s.mode = std::string(to_string(config.mode));
  s.workers = config.cluster.num_workers;
  s.servers = config.mode == Mode::kAllreduce ? 0 : config.cluster.num_servers;
  s.model = config.workload.model;
  s.dataset = config.workload.dataset;
  std::int64_t images = 0;
  const bool go_on = drops_failed_workers(config.cluster.on_worker_failure);
  for (const WorkerMetrics& w : metrics.workers) {
    for (const RejoinRecord& r : w.rejoins) {
      s.restarts.push_back(RestartSummary{w.rank, r.time_s, r.step, r.retired_by_change});
    }
    for (const ResumeRecord& r : w.resumes) s.resumed_from.push_back(r.step);
    if (!w.end && (go_on || partial != nullptr)) {
      // Under "continue" a worker without its end was dropped; in a partial
      // run it may just not have finished (its time then counts), unless the
      // others went on without it before the run was cut short.
      const bool dropped =
          go_on && (partial == nullptr || dropped_before_the_end(w, metrics, config.cluster.num_workers));
      s.per_worker.push_back(unfinished_worker_summary(w, dropped));
      if (dropped) {
        s.dropped_workers.push_back(w.rank);
      } else {
        s.wall_time_s = std::max(s.wall_time_s, s.per_worker.back().time_s);
      }
      images += s.per_worker.back().images;
      continue;
    }
    s.per_worker.push_back(worker_summary(w));
    s.wall_time_s = std::max(s.wall_time_s, s.per_worker.back().time_s);
    images += s.per_worker.back().images;
  }
  for (const WorkerSummary& w : s.per_worker) s.skipped_steps += w.skipped_steps;
  for (const WorkerMetrics& w : metrics.workers) {
    if (w.compute && !s.compute) s.compute = w.compute;  // the lowest rank that said
  }
  std::sort(s.resumed_from.begin(), s.resumed_from.end());  // every worker of a resume says its step
  s.resumed_from.erase(std::unique(s.resumed_from.begin(), s.resumed_from.end()), s.resumed_from.end());
  s.global_images_per_s = s.wall_time_s > 0 ? static_cast<double>(images) / s.wall_time_s
                                            : std::numeric_limits<double>::quiet_NaN();
  // Worker 0 evaluates; if it was dropped (allreduce, "continue"), the lowest
  // worker left goes on: their records, in step order, are one series.
  std::vector<EvalRecord> evals;
  for (const WorkerMetrics& w : metrics.workers) evals.insert(evals.end(), w.evals.begin(), w.evals.end());
  std::stable_sort(evals.begin(), evals.end(), [](const EvalRecord& a, const EvalRecord& b) { return a.step < b.step; });
  add_evaluations(s, evals);
  if (config.mode == Mode::kAsync || config.mode == Mode::kSsp) s.staleness = staleness_summary(metrics.servers);
  s.membership_changes = membership_changes(s.workers, metrics);
  s.abandoned_joins = metrics.abandoned_joins;
  for (const ServerMetrics& server : metrics.servers) s.partial_updates += server.partial_updates;
  for (const ServerMetrics& server : metrics.servers) {
    if (server.rejoined_from_step >= 0) {
      s.server_restarts.push_back({server.rank, server.rejoined_from_step, server.lost_updates, server.lost_pushes});
    }
  }
  if (config.mode == Mode::kSsp) {
    SspSummary ssp;
    ssp.staleness_bound = config.ps.staleness_bound;
    for (const ServerMetrics& server : metrics.servers) ssp.clock_gap_max = std::max(ssp.clock_gap_max, server.clock_gap_max);
    for (const WorkerSummary& w : s.per_worker) ssp.blocked_s_mean += w.blocked_s;
    if (!s.per_worker.empty()) ssp.blocked_s_mean /= static_cast<double>(s.per_worker.size());
    s.ssp = ssp;
  }
  return s;
}

std::string summary_json(const RunSummary& s) {
  std::string workers;
  for (const WorkerSummary& w : s.per_worker) workers += (workers.empty() ? "\n    " : ",\n    ") + worker_json(w);
  return "{\n  \"mode\": " + json_quote(s.mode) + ",\n  \"workers\": " + std::to_string(s.workers) +
         ",\n  \"servers\": " + std::to_string(s.servers) + ",\n  \"model\": " + json_quote(s.model) +
         ",\n  \"dataset\": " + json_quote(s.dataset) + ",\n  \"compute\": " + compute_json(s.compute) +
         ",\n  \"final_test_accuracy\": " + json_number(s.final_test_accuracy) +
         ",\n  \"wall_time_s\": " + json_number(s.wall_time_s) +
         ",\n  \"time_to_accuracy\": " + time_to_accuracy_json(s) +
         ",\n  \"global_images_per_s\": " + json_number(s.global_images_per_s) + ",\n  \"per_worker\": [" + workers +
         (workers.empty() ? "]" : "\n  ]") + ",\n  \"staleness\": " + staleness_json(s.staleness) +
         ",\n  \"ssp\": " + ssp_json(s.ssp) + ",\n  \"dropped_workers\": " + int_list_json(s.dropped_workers) +
         ",\n  \"restarts\": " + restarts_json(s.restarts) +
         ",\n  \"resumed_from\": " + int_list_json(s.resumed_from) +
         ",\n  \"membership_changes\": " + membership_changes_json(s.membership_changes) +
         ",\n  \"abandoned_joins\": " + abandoned_joins_json(s.abandoned_joins) +
         ",\n  \"partial_updates\": " + std::to_string(s.partial_updates) +
         ",\n  \"server_restarts\": " + server_restarts_json(s) +
         ",\n  \"skipped_steps\": " + std::to_string(s.skipped_steps) + ",\n  \"resources\": " + resources_json(s) +
         ",\n  \"partial\": " + (s.partial ? "true" : "false") +
         ",\n  \"partial_reason\": " + (s.partial ? json_quote(s.partial_reason) : std::string("null")) +
         ",\n  \"warnings\": " + warnings_json(s) + "\n}\n";
}

RunSummary write_run_summary(const std::filesystem::path& run_dir, const PartialRun* partial) {
  const RunConfig config = load_config((run_dir / "config.toml").string());
  const int servers = config.mode == Mode::kAllreduce ? 0 : config.cluster.num_servers;
  std::vector<std::string> missing;
  RunMetrics metrics = read_run_metrics(run_dir, config.cluster.num_workers, servers,
                                        drops_failed_workers(config.cluster.on_worker_failure),
                                        partial != nullptr ? &missing : nullptr);
  std::vector<std::string> notes;
  metrics.abandoned_joins = read_scheduler_records(run_dir, notes);
  auto abandoned = [&](int w) {
    return std::any_of(metrics.abandoned_joins.begin(), metrics.abandoned_joins.end(),
                       [w](const AbandonedJoinRecord& j) { return j.rank == w; });
  };
  // Elastic membership: the workers that joined a slot past cluster.workers (--join), when there is one.
  for (int w = config.cluster.num_workers; w < max_workers(config.cluster); ++w) {
    if (!std::filesystem::exists(worker_metrics_path(run_dir, w))) continue;
    try {
      WorkerMetrics joiner = read_worker_metrics(worker_metrics_path(run_dir, w), w, true);
      if (!joiner.end && joiner.steps.empty()) {  // its join was abandoned before it trained
        if (!abandoned(w)) missing.push_back("worker " + std::to_string(w) + " (a joiner) never entered the job");
        continue;
      }
      metrics.workers.push_back(std::move(joiner));
    } catch (const DataError& e) {
      missing.push_back("worker " + std::to_string(w) + " (a joiner) left out: " + e.what());
    }
  }
  RunSummary s = summarize(config, metrics, partial);
  s.warnings.insert(s.warnings.end(), missing.begin(), missing.end());
  s.warnings.insert(s.warnings.end(), notes.begin(), notes.end());
  for (const ResourceSeries& series : read_run_resources(run_dir, s.warnings)) {
    s.resources.push_back(summarize_resources(series));
  }
  write_text_file_atomic(run_dir / "summary.json", summary_json(s));
  write_text_file_atomic(run_dir / "summary.md", summary_markdown(s, run_dir.string()));
  return s;
}

std::string recorded_partial_reason(const std::filesystem::path& run_dir) {
  try {
    std::ifstream in(run_dir / "summary.json");
    if (!in) return "";
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const JsonValue doc = parse_json(text, "summary.json");
    const JsonValue* reason = doc.find("partial_reason");
    return reason != nullptr && !reason->is_null() ? reason->as_string("partial_reason") : "";
  } catch (const std::exception&) {
    return "";  // not readable: no reason recorded
  }
}

}  // namespace pstrain::report
