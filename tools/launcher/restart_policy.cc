#include "tools/launcher/restart_policy.h"

#include <algorithm>
#include <cstdlib>

#include "common/base/errors.h"

namespace pstrain::launcher {

std::optional<NodeName> parse_node_name(const std::string& name) {
  const auto space = name.find(' ');
  if (space == std::string::npos || space + 1 >= name.size()) return std::nullopt;
  NodeName out{name.substr(0, space), -1};
  const std::string digits = name.substr(space + 1);
  if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 9) return std::nullopt;
  out.rank = std::atoi(digits.c_str());
  return out;
}

std::optional<int> RestartBudget::take(const std::string& name) {
  int& n = used_[name];
  if (n >= max_) return std::nullopt;
  return ++n;
}

int RestartBudget::used(const std::string& name) const {
  const auto it = used_.find(name);
  return it == used_.end() ? 0 : it->second;
}

void JoinerRestarts::exited(Exit exit) {
  const std::string name = exit.name;
  exits_.insert_or_assign(name, std::move(exit));
}

void JoinerRestarts::declared(const std::string& name, std::int64_t pid) {
  if (declared_.size() >= 256) declared_.erase(declared_.begin());  // about processes long gone
  declared_.emplace_back(name, pid);
}

std::vector<JoinerRestarts::Exit> JoinerRestarts::take_due() {
  std::vector<Exit> due;
  for (auto it = exits_.begin(); it != exits_.end();) {
    const Exit& e = it->second;
    const auto match = std::find_if(declared_.begin(), declared_.end(), [&](const auto& d) {
      return d.first == e.name && (e.remote || d.second == e.pid);
    });
    if (match == declared_.end()) {
      ++it;
      continue;
    }
    declared_.erase(match);
    members_.insert(e.name);
    due.push_back(e);
    it = exits_.erase(it);
  }
  return due;
}

WorkerFailurePolicy failure_policy(const RunConfig& config, const std::string& name) {
  const std::optional<NodeName> n = parse_node_name(name);
  if (!n) return WorkerFailurePolicy::kAbort;
  if (n->role == "worker") return config.cluster.on_worker_failure;
  if (n->role == "server" && config.cluster.on_server_failure == ServerFailurePolicy::kRestart) {
    return WorkerFailurePolicy::kRestart;
  }
  return WorkerFailurePolicy::kAbort;
}

NodeSpec rejoin_spec(const LaunchPlan& plan, const std::string& scheduler_endpoint, const std::string& name) {
  for (NodeSpec& spec : node_specs(plan, scheduler_endpoint, {"--rejoin"})) {
    if (spec.name != name) continue;
    spec.append_log = true;
    return spec;
  }
  throw Error("restart: the plan has no node named '" + name + "'");
}

std::string restart_line(const std::string& name, const std::string& exit_text, int take, int max_restarts) {
  const std::optional<NodeName> n = parse_node_name(name);
  const std::string key = n && n->role == "server" ? "on_server_failure" : "on_worker_failure";
  return name + " " + exit_text + ": restarting it (" + std::to_string(take) + " of " + std::to_string(max_restarts) +
         ", cluster." + key + " = \"restart\")";
}

}  // namespace pstrain::launcher
