// summary.md: the summary as Markdown tables (see summary.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "tools/report/summary.h"

namespace pstrain::report {
namespace {

// `x` with `decimals` digits after the point; "n/a" when absent or not finite.
std::string fixed(const std::optional<double>& x, int decimals) {
  if (!x || !std::isfinite(*x)) return "n/a";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, *x);
  return buf;
}

std::string row(const std::vector<std::string>& cells) {
  std::string out = "|";
  for (const std::string& c : cells) out += " " + c + " |";
  return out + "\n";
}

std::string table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows) {
  std::string out = row(header);
  out += row(std::vector<std::string>(header.size(), "---"));
  for (const auto& r : rows) out += row(r);
  return out;
}

std::optional<double> percent(const std::optional<double>& fraction) {
  if (!fraction) return std::nullopt;
  return *fraction * 100.0;
}

std::string headline(const RunSummary& s) {
  return table({"mode", "servers", "workers", "model", "dataset", "final test accuracy (%)", "training wall time (s)",
                "throughput (images/s)"},
               {{s.mode, std::to_string(s.servers), std::to_string(s.workers), s.model, s.dataset,
                 fixed(percent(s.final_test_accuracy), 2), fixed(s.wall_time_s, 2),
                 fixed(s.global_images_per_s, 1)}});
}

std::string time_to_accuracy(const RunSummary& s) {
  std::vector<std::string> header;
  std::vector<std::string> cells;
  for (const AccuracyTime& at : s.time_to_accuracy) {
    header.push_back("time to " + fixed(percent(std::stod(at.threshold)), 0) + "% (s)");
    cells.push_back(fixed(at.time_s, 2));
  }
  return table(header, {cells});
}

std::string staleness(const StalenessSummary& st) {
  std::string hist;
  for (const auto& [staleness_steps, count] : st.histogram) {
    hist += (hist.empty() ? "" : ", ") + std::to_string(staleness_steps) + ": " + std::to_string(count);
  }
  const std::string max = st.max ? std::to_string(*st.max) : "n/a";
  return table({"mean staleness (updates)", "max staleness (updates)", "histogram (staleness: pushes)"},
               {{fixed(st.mean, 2), max, hist.empty() ? "empty" : hist}});
}

std::string per_worker(const RunSummary& s) {
  std::vector<std::vector<std::string>> rows;
  for (const WorkerSummary& w : s.per_worker) {
    rows.push_back({std::to_string(w.rank), w.status, fixed(w.time_s, 2), std::to_string(w.images),
                    fixed(w.images_per_s, 1), fixed(w.compute_s, 2), fixed(w.pull_s, 2), fixed(w.push_s, 2)});
  }
  // Allreduce workers pull and push nothing: their records' pull and push
  // fields hold the local optimizer update and the allreduce wait after backward.
  const bool allreduce = s.mode == "allreduce";
  return table({"worker", "status", "time (s)", "images", "throughput (images/s)", "compute (s)",
                allreduce ? "update (s)" : "pull (s)", allreduce ? "allreduce wait (s)" : "push (s)"},
               rows);
}

std::optional<double> mib(const std::optional<double>& bytes) {
  if (!bytes) return std::nullopt;
  return *bytes / (1024.0 * 1024.0);
}

std::string resources(const RunSummary& s) {
  bool gpu = false, collective = false;
  for (const ResourceSummary& r : s.resources) {
    gpu = gpu || r.has_gpu();
    collective = collective || r.collective_bytes.has_value();
  }
  std::vector<std::string> header{"process", "samples", "CPU mean (%)", "CPU peak (%)", "peak RSS (MiB)",
                                  "sent (MiB)", "received (MiB)", "send rate (MiB/s)", "receive rate (MiB/s)"};
  if (collective) header.push_back("allreduced (MiB)");
  if (gpu) {
    for (const char* h : {"GPU util mean (%)", "GPU util peak (%)", "GPU peak memory (MiB)", "GPU power mean (W)"}) {
      header.push_back(h);
    }
  }
  std::vector<std::vector<std::string>> rows;
  for (const ResourceSummary& r : s.resources) {
    std::vector<std::string> cells{r.role + " " + std::to_string(r.rank), std::to_string(r.samples),
                                   fixed(r.cpu_percent_mean, 1), fixed(r.cpu_percent_peak, 1),
                                   fixed(mib(r.rss_peak_bytes), 1), fixed(mib(r.bytes_sent), 2),
                                   fixed(mib(r.bytes_received), 2), fixed(mib(r.send_bytes_per_s), 2),
                                   fixed(mib(r.receive_bytes_per_s), 2)};
    if (collective) cells.push_back(fixed(mib(r.collective_bytes), 2));
    if (gpu) {
      for (const std::string& c : {fixed(r.gpu_util_percent_mean, 1), fixed(r.gpu_util_percent_peak, 1),
                                   fixed(mib(r.gpu_mem_used_peak_bytes), 0), fixed(r.gpu_power_w_mean, 1)}) {
        cells.push_back(c);
      }
    }
    rows.push_back(std::move(cells));
  }
  return table(header, rows);
}

}  // namespace

std::string summary_markdown(const RunSummary& s, const std::string& run_dir) {
  std::string out = "# Run summary: " + run_dir + "\n\n";
  if (s.partial) {
    std::int64_t steps = -1;
    for (const WorkerSummary& w : s.per_worker) {
      if (w.status != "dropped") steps = steps < 0 ? w.steps_done : std::min(steps, w.steps_done);
    }
    out += "**Partial**: the run did not finish (" + s.partial_reason + "). This is what ran until then" +
           (steps >= 0 ? " (" + std::to_string(steps) + " steps by every worker left)" : std::string()) +
           "; a worker that had not finished is \"interrupted\".\n\n";
  }
  out += headline(s) + "\n" + time_to_accuracy(s);
  if (s.compute) {
    out += "\nCompute: " + s.compute->backend + "; convolutions " + s.compute->conv_path + " (" +
           s.compute->conv_detail + "), precision " + s.compute->precision + ".\n";
  }
  if (s.staleness) out += "\n## Staleness\n\n" + staleness(*s.staleness);
  if (!s.dropped_workers.empty()) {
    std::string ranks;
    for (const int r : s.dropped_workers) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    out += "\n## Failures\n\nWorkers dropped (cluster.on_worker_failure = \"continue\"): " + ranks +
           "; the job went on without them. Sync chunk updates made without them: " +
           std::to_string(s.partial_updates) + ".\n";
  }
  if (!s.server_restarts.empty() && s.dropped_workers.empty()) out += "\n## Failures\n";
  for (const RunSummary::ServerRestart& r : s.server_restarts) {
    out += "\nServer " + std::to_string(r.rank) + " failed and rejoined from " +
           (r.from_step == 0 ? std::string("its initial weights (it failed before the first checkpoint; its optimizer "
                                           "state was lost too)")
                             : "the checkpoint at step " + std::to_string(r.from_step)) +
           " (cluster.on_server_failure = \"restart\"): " +
           std::to_string(r.lost_updates) + " chunk updates of its shard were lost" +
           (r.lost_pushes > 0 ? ", and " + std::to_string(r.lost_pushes) + " pushes that only the failed server had received" : "") +
           ".\n";
  }
  if (!s.restarts.empty()) {
    out += "\n## Restarts\n\nWorkers taken back by a new process (cluster.on_worker_failure = \"restart\"):\n\n";
    for (const RestartSummary& r : s.restarts) {
      char line[240];
      if (r.retired_by_change != 0) {
        const std::string by = r.retired_by_change < 0 ? std::string("a request for fewer workers")
                                                       : "membership change " + std::to_string(r.retired_by_change);
        std::snprintf(line, sizeof(line), "- worker %d's new process left at once, %.1f s into the job: %s had "
                      "retired the rank while it was down\n", r.rank, r.time_s, by.c_str());
      } else {
        std::snprintf(line, sizeof(line), "- worker %d rejoined at step %lld, %.1f s into the job\n", r.rank,
                      static_cast<long long>(r.step), r.time_s);
      }
      out += line;
    }
  }
  if (!s.membership_changes.empty() || !s.abandoned_joins.empty()) out += "\n## Membership\n";
  if (!s.membership_changes.empty()) {
    out += "\nThe workers sharing the training set changed:\n\n";
    for (const MembershipChangeSummary& c : s.membership_changes) {
      out += "- epoch " + std::to_string(c.epoch) + (c.step >= 0 ? ", step " + std::to_string(c.step) : "") + ": " +
             std::to_string(c.old_workers) + " -> " + std::to_string(c.new_workers) + " workers (" + c.reason + ")\n";
    }
  }
  if (!s.abandoned_joins.empty()) {
    out += "\nJoins abandoned before their boundary (the slot vacant again; the change went on without it):\n\n";
    for (const AbandonedJoinRecord& j : s.abandoned_joins) {
      char when[64];
      std::snprintf(when, sizeof(when), "%.1f s into the job", j.time_s);
      out += "- worker " + std::to_string(j.rank) + " (join abandoned), " + when +
             (j.change >= 0 ? ", membership change " + std::to_string(j.change) : "") + ": " + j.reason + "\n";
    }
  }
  if (s.skipped_steps > 0) {
    std::string each;
    for (const WorkerSummary& w : s.per_worker) {
      each += (each.empty() ? "" : ", ") + ("worker " + std::to_string(w.rank) + ": " + std::to_string(w.skipped_steps));
    }
    out += "\n## Skipped steps\n\nSteps whose update a worker dropped for a non-finite loss or gradient "
           "(workload.on_nonfinite = \"skip\"): " + std::to_string(s.skipped_steps) + " (" + each + ").\n";
  }
  if (s.ssp) {
    out += "\n## Bounded staleness (ssp)\n\n" +
           table({"bound (steps)", "largest clock gap at a pull (steps)", "mean time blocked by the bound (s)"},
                 {{std::to_string(s.ssp->staleness_bound), std::to_string(s.ssp->clock_gap_max),
                   fixed(s.ssp->blocked_s_mean, 2)}});
  }
  if (!s.resumed_from.empty()) {
    std::string steps;
    for (const std::int64_t step : s.resumed_from) steps += (steps.empty() ? "" : ", ") + std::to_string(step);
    out += "\n## Resumed\n\nThe run was resumed (launch --resume) from the checkpoint of step " + steps +
           "; the counts and times go on from the checkpoint's.\n";
  }
  out += "\n## Per worker\n\n" + per_worker(s);
  if (!s.resources.empty()) out += "\n## Resource use\n\n" + resources(s);
  if (!s.warnings.empty()) {
    out += "\n## Warnings\n\n";
    for (const std::string& w : s.warnings) out += "- " + w + "\n";
  }
  return out;
}

}  // namespace pstrain::report
