#include "tools/launcher/grow.h"

#include <charconv>
#include <optional>

#include "common/base/errors.h"
#include "tools/launcher/restart_policy.h"

namespace pstrain::launcher {

namespace {

NodeSpec slot_spec(const LaunchPlan& plan, const std::string& scheduler_endpoint, int rank, const char* how) {
  LaunchPlan joiner = plan;
  joiner.resume_dir.clear();
  joiner.num_servers = 0;
  joiner.num_workers = rank + 1;
  std::vector<std::string>& hosts = joiner.config.cluster.worker_hosts;
  if (!hosts.empty() && hosts.size() <= static_cast<std::size_t>(rank)) hosts.resize(static_cast<std::size_t>(rank) + 1);
  NodeSpec spec = node_specs(joiner, scheduler_endpoint, {how}).back();
  spec.append_log = true;  // a slot a retired worker held, or the failed joiner's: its log goes on
  return spec;
}

}  // namespace

NodeSpec join_spec(const LaunchPlan& plan, const std::string& scheduler_endpoint, int rank) {
  return slot_spec(plan, scheduler_endpoint, rank, "--join");
}

NodeSpec rejoin_joiner_spec(const LaunchPlan& plan, const std::string& scheduler_endpoint, int rank) {
  return slot_spec(plan, scheduler_endpoint, rank, "--rejoin");
}

std::optional<int> parse_workers_request(const std::string& line) {
  if (!line.starts_with("workers ")) return std::nullopt;
  int n = 0;
  const char* first = line.data() + 8;
  const auto [end, ec] = std::from_chars(first, line.data() + line.size(), n);
  if (ec != std::errc() || end != line.data() + line.size() || n < 1) return std::nullopt;
  return n;
}

std::vector<NodeSpec> Grower::take(const std::function<std::vector<NodeState>()>& nodes,
                                   const std::string& scheduler_endpoint,
                                   const std::function<void(const std::string&)>& say) {
  std::optional<int> wanted;
  for (const std::string& line : requests_.read()) {
    if (const std::optional<int> n = parse_workers_request(line)) wanted = n;
  }
  if (!wanted) return {};
  const int slots = std::max(plan_.num_workers, max_workers(plan_.config.cluster));
  std::set<int> running;
  for (const NodeState& n : nodes()) {
    const std::optional<NodeName> name = parse_node_name(n.spec.name);
    if (name && name->role == "worker" && !n.status) running.insert(name->rank);
  }
  const int have = static_cast<int>(running.size());
  if (*wanted <= have) return {};  // a shrink, or no change: the scheduler's alone
  if (*wanted > slots) {
    say("resize request for " + std::to_string(*wanted) + " workers: the job has " + std::to_string(slots) +
        " slots (cluster.max_workers); the scheduler refuses it, no worker started");
    return {};
  }
  std::vector<NodeSpec> specs;
  for (int rank = 0; rank < slots && have + static_cast<int>(specs.size()) < *wanted; ++rank) {
    if (running.count(rank) != 0) continue;
    specs.push_back(join_spec(plan_, scheduler_endpoint, rank));
    joiners_.insert(specs.back().name);
  }
  say("resize request for " + std::to_string(*wanted) + " workers: starting " + std::to_string(specs.size()) +
      " with --join (the job runs " + std::to_string(have) + ")");
  return specs;
}

}  // namespace pstrain::launcher
