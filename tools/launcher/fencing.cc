#include "tools/launcher/fencing.h"

#include <exception>

#include "tools/report/json_value.h"

namespace pstrain::launcher {

std::optional<DeclaredFailure> parse_declared_failure(std::string_view line, std::string& error) {
  try {
    const report::JsonValue j = report::parse_json(line, "failures.jsonl line");
    auto get = [&](std::string_view key) -> const report::JsonValue& {
      const report::JsonValue* v = j.find(key);
      if (v == nullptr) throw std::runtime_error("no key '" + std::string(key) + "'");
      return *v;
    };
    const std::string& role = get("role").as_string("key 'role'");
    if (role != "server" && role != "worker") throw std::runtime_error("role '" + role + "' (server or worker)");
    DeclaredFailure f;
    f.node = role + " " + std::to_string(get("rank").as_integer("key 'rank'"));
    f.pid = get("pid").as_integer("key 'pid'");
    f.silent = get("silent").as_bool("key 'silent'");
    f.last_seen_s = get("last_seen_s").as_number("key 'last_seen_s'");
    f.reason = get("reason").as_string("key 'reason'");
    return f;
  } catch (const std::exception& e) {
    error = e.what();
    return std::nullopt;
  }
}

std::optional<std::size_t> node_to_fence(const std::vector<NodeState>& nodes, const DeclaredFailure& failure) {
  if (!failure.silent) return std::nullopt;
  for (std::size_t i = nodes.size(); i-- > 0;) {  // the newest process of that name
    const NodeState& n = nodes[i];
    if (n.spec.name != failure.node) continue;
    if (n.status) return std::nullopt;  // it has exited already
    // Started after the scheduler last heard of the failed process: a
    // replacement (even one that got the same pid back), never the culprit.
    if (n.started_s > failure.last_seen_s) return std::nullopt;
    const bool remote = n.spec.stdin_pipe;
    if (remote || n.pid == failure.pid) return i;
    return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace pstrain::launcher
