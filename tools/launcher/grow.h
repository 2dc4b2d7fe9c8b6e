// The launcher's side of growing a job (docs/architecture.md, "Elastic
// membership"; docs/run_directory.md, ctl.txt). `pstrain-ctl RUN_DIR workers
// N` appends "workers N" to RUN_DIR/ctl.txt, the one channel of a resize:
// the scheduler reads it (a shrink retires the highest ranks; a grow waits
// for workers to join) and so does the launcher, which for N above the
// workers it runs starts the missing ones with --join --rank R, R the lowest
// slots it runs no worker in, here or on the configured host of slot R
// (cluster.worker_hosts; a slot past that list runs on this machine). A
// joiner's failure is told to the scheduler, which decides: before its
// boundary the join is abandoned (its slot vacant again), after it the
// failure policy applies (under "restart" the launcher restarts it once the
// scheduler has declared the member failed: launcher.cc, JoinerRestarts).
#pragma once

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/base/appended_lines.h"
#include "tools/launcher/launch_plan.h"
#include "tools/launcher/supervisor.h"

namespace pstrain::launcher {

// The joiner of worker slot `rank`: the worker's command with --join (and
// without --resume: a joiner takes the job's current weights).
NodeSpec join_spec(const LaunchPlan& plan, const std::string& scheduler_endpoint, int rank);
// The restart of a joiner of slot `rank` that failed after its boundary (a
// member then; cluster.on_worker_failure = "restart"): the same command with
// --rejoin instead of --join, its log appended to.
NodeSpec rejoin_joiner_spec(const LaunchPlan& plan, const std::string& scheduler_endpoint, int rank);

// "workers N" -> N; nullopt for any other line.
std::optional<int> parse_workers_request(const std::string& line);

class Grower {
 public:
  explicit Grower(const LaunchPlan& plan) : plan_(plan), requests_(plan.ctl_file(), 256) {}
  // The joiners to start now: for the newest request of more workers than
  // `nodes()` runs (asked only when a request came) (and at most cluster.max_workers), one per missing worker.
  // `say` tells what it does or why not.
  std::vector<NodeSpec> take(const std::function<std::vector<NodeState>()>& nodes, const std::string& scheduler_endpoint,
                             const std::function<void(const std::string&)>& say);
  // Whether `name` ("worker R") is a joiner this launcher started.
  bool is_joiner(const std::string& name) const { return joiners_.count(name) != 0; }

 private:
  const LaunchPlan& plan_;
  AppendedLines requests_;
  std::set<std::string> joiners_;
};

}  // namespace pstrain::launcher
