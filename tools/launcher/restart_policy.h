// The launcher's "restart" failure policies (cluster.on_worker_failure and
// cluster.on_server_failure = "restart"): a node that fails is started again
// with its own command plus `--rejoin` (its rank is already on the command
// line, `--rank R`), at most cluster.max_restarts times per node. Generic
// over roles: the spec to start comes from the plan's node_specs() with the
// extra argument, so remote nodes (ssh) are restarted the same way.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tools/launcher/launch_plan.h"
#include "tools/launcher/supervisor.h"

namespace pstrain::launcher {

// "worker 3" -> {"worker", 3}; nullopt for another shape ("scheduler").
struct NodeName {
  std::string role;
  int rank = -1;
};
std::optional<NodeName> parse_node_name(const std::string& name);

// Counts restarts per node name against max_restarts.
class RestartBudget {
 public:
  explicit RestartBudget(int max_restarts) : max_(max_restarts) {}
  // The number of this restart (1-based) if one is left for `name` (and
  // counts it), else nullopt.
  std::optional<int> take(const std::string& name);
  int used(const std::string& name) const;
  int max() const { return max_; }

 private:
  int max_;
  std::map<std::string, int> used_;
};

// Joiners (workers the launcher started for a grow, tools/launcher/grow.h)
// under on_worker_failure = "restart": only the scheduler knows whether a
// joiner that failed had passed its boundary (a member: it is dropped and
// declared failed in RUN_DIR/failures.jsonl) or not (the join is abandoned,
// nothing is declared). So a joiner's failed exit waits here until the
// scheduler declares that process failed (either may come first); then it is
// due for a restart, and from then on the rank is a member, restarted at its
// exit like any other.
class JoinerRestarts {
 public:
  struct Exit {
    std::string name;      // "worker 2"
    std::int64_t pid = 0;  // the process that exited
    bool remote = false;   // over ssh: the scheduler knows another pid, matched by name alone
    std::string text;      // how it exited
  };
  void exited(Exit exit);
  // A failures.jsonl record for `name` (the process `pid` the scheduler heard from).
  void declared(const std::string& name, std::int64_t pid);
  // The exits the scheduler has declared failed (each once); their ranks are members from now on.
  std::vector<Exit> take_due();
  bool member(const std::string& name) const { return members_.count(name) != 0; }

 private:
  std::map<std::string, Exit> exits_;
  std::vector<std::pair<std::string, std::int64_t>> declared_;
  std::set<std::string> members_;
};

// The policy that applies to a failed node named `name` under `config`: a
// worker's on_worker_failure; a server's on_server_failure as the same value
// (kAbort or kRestart); kAbort for the scheduler (its failure always aborts).
WorkerFailurePolicy failure_policy(const RunConfig& config, const std::string& name);

// The spec that restarts node `name`: node_specs(plan, endpoint) with
// "--rejoin" added, its log appended to. Throws Error for an unknown name.
NodeSpec rejoin_spec(const LaunchPlan& plan, const std::string& scheduler_endpoint, const std::string& name);

// The launcher's line for a restart: "worker 1 exited with signal 9:
// restarting it (1 of 3, cluster.on_worker_failure = \"restart\")".
std::string restart_line(const std::string& name, const std::string& exit_text, int take, int max_restarts);

}  // namespace pstrain::launcher
