// Run config parsing, built on the key table (config_fields.h) and the
// single-value readers and writers (config_values.h). This file holds the
// unknown-key checks, check_consistency() (the rules between keys) and the
// public functions of common/config/config.h.
#include "common/config/config.h"

#include <toml++/toml.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <system_error>
#include <utility>
#include <variant>
#include <vector>

#include "common/config/config_fields.h"
#include "common/config/config_values.h"
#include "common/base/errors.h"

namespace pstrain {
namespace {

using config_detail::Closest;
using config_detail::ConstFieldPtr;
using config_detail::describe;
using config_detail::expected;
using config_detail::FieldPtr;
using config_detail::format_bound;
using config_detail::is_section;
using config_detail::quote;
using config_detail::read_override_value;
using config_detail::read_value;
using config_detail::Rule;
using config_detail::section_names;
using config_detail::Site;
using config_detail::visit_fields;
using config_detail::write_value;

std::string full_key(std::string_view section, std::string_view key) {
  return section.empty() ? std::string(key) : std::string(section) + "." + std::string(key);
}

// ---- Unknown keys ----------------------------------------------------------------

struct KnownKey {
  std::string_view section;
  std::string_view key;
};

std::vector<KnownKey> known_keys() {
  RunConfig defaults;
  std::vector<KnownKey> keys;
  visit_fields(defaults, [&keys](std::string_view section, std::string_view key, FieldPtr, const Rule&) {
    keys.push_back({section, key});
  });
  return keys;
}

// The error for `name` (a key of `section`, or top-level when section is
// ""), with the closest known name when one is near.
std::string unknown_key_text(std::string_view section, std::string_view name) {
  Closest closest(name);
  std::string listing;
  for (const KnownKey& k : known_keys()) {
    if (k.section != section) continue;
    listing += (listing.empty() ? "" : ", ") + std::string(k.key);
    closest.offer(k.key, full_key(section, k.key));
  }
  if (section.empty()) {
    for (const auto s : section_names()) {
      listing += ", [" + std::string(s) + "]";
      closest.offer(s, std::string(s));
    }
  }
  for (const KnownKey& k : known_keys()) {  // right key, wrong section
    if (k.section != section && k.key == name) closest.set_if_none(full_key(k.section, k.key));
  }
  const std::string what = section.empty() ? "unknown top-level key" : "unknown key";
  if (!closest.best().empty()) return what + "; did you mean '" + closest.best() + "'?";
  const std::string where = section.empty() ? "at the top level" : "in [" + std::string(section) + "]";
  return what + "; expected one of " + listing + " " + where;
}

bool is_known(std::string_view section, std::string_view name) {
  const auto keys = known_keys();
  return std::any_of(keys.begin(), keys.end(),
                     [&](const KnownKey& k) { return k.section == section && k.key == name; });
}

void check_known_keys(const toml::table& root, const std::string& source) {
  for (const auto& [top_key, top_node] : root) {
    const std::string_view name = top_key.str();
    const Site site{source, true, std::string(name)};
    if (is_known("", name)) continue;
    if (!is_section(name)) site.fail(top_node, unknown_key_text("", name));
    const auto* table = top_node.as_table();
    if (table == nullptr) site.fail(top_node, "expected a table, got " + describe(top_node));
    for (const auto& [key, node] : *table) {
      if (!is_known(name, key.str())) {
        const Site inner{source, true, full_key(name, key.str())};
        inner.fail(node, unknown_key_text(name, key.str()));
      }
    }
  }
}

// ---- Rules between fields --------------------------------------------------------

// where(key, other_key) gives the error's "FILE:LINE" or "--set ..." part.
using WhereFn = std::function<std::string(std::string_view, std::string_view)>;

void check_consistency(const RunConfig& c, const WhereFn& where) {
  const auto fail = [&where](std::string_view key, std::string_view other, const std::string& what) {
    throw ConfigError(where(key, other) + ": key '" + std::string(key) + "': " + what);
  };
  const auto& cl = c.cluster;
  if (c.mode != Mode::kAllreduce && cl.num_servers < 1) {
    fail("cluster.servers", "mode",
         "expected an integer >= 1 when mode is " + quote(to_string(c.mode)) +
             " (0 only with \"allreduce\"), got " + std::to_string(cl.num_servers));
  }
  if (!cl.server_hosts.empty() && cl.server_hosts.size() != static_cast<std::size_t>(cl.num_servers)) {
    fail("cluster.server_hosts", "cluster.servers",
         "expected " + std::to_string(cl.num_servers) + " hosts (one per server, cluster.servers), got " +
             std::to_string(cl.server_hosts.size()));
  }
  if (!cl.worker_hosts.empty() && cl.worker_hosts.size() != static_cast<std::size_t>(cl.num_workers)) {
    fail("cluster.worker_hosts", "cluster.workers",
         "expected " + std::to_string(cl.num_workers) + " hosts (one per worker, cluster.workers), got " +
             std::to_string(cl.worker_hosts.size()));
  }
  if (cl.min_workers > cl.num_workers) {
    fail("cluster.min_workers", "cluster.workers",
         "expected at most cluster.workers (" + std::to_string(cl.num_workers) +
             "; 0 = cluster.workers), got " + std::to_string(cl.min_workers));
  }
  if (cl.max_workers != 0 && cl.max_workers < cl.num_workers) {
    fail("cluster.max_workers", "cluster.workers",
         "expected at least cluster.workers (" + std::to_string(cl.num_workers) +
             "; 0 = cluster.workers), got " + std::to_string(cl.max_workers));
  }
  if (!cl.worker_hosts.empty() && max_workers(cl) > cl.num_workers) {
    fail("cluster.max_workers", "cluster.worker_hosts",
         "expected 0 or cluster.workers (" + std::to_string(cl.num_workers) +
             ") when cluster.worker_hosts is given (a host per slot is not supported yet), got " +
             std::to_string(cl.max_workers));
  }
  if (cl.heartbeat_timeout_ms <= cl.heartbeat_interval_ms) {
    fail("cluster.heartbeat_timeout_ms", "cluster.heartbeat_interval_ms",
         "expected more than cluster.heartbeat_interval_ms (" + std::to_string(cl.heartbeat_interval_ms) +
             "), got " + std::to_string(cl.heartbeat_timeout_ms));
  }
  if (cl.on_server_failure == ServerFailurePolicy::kRestart && c.mode == Mode::kAllreduce) {
    fail("cluster.on_server_failure", "mode", "expected \"abort\" when mode is \"allreduce\" (no servers), got \"restart\"");
  }
  if (cl.on_server_failure == ServerFailurePolicy::kRestart && c.checkpoint.interval_steps == 0) {
    fail("cluster.on_server_failure", "checkpoint.interval_steps",
         "expected \"abort\" when checkpoint.interval_steps is 0 (a restarted server reloads its shards from the "
         "newest checkpoint), got \"restart\"");
  }
  if (c.ps.partition_bytes > cl.max_message_bytes) {
    fail("ps.partition_bytes", "cluster.max_message_bytes",
         "expected at most cluster.max_message_bytes (" + std::to_string(cl.max_message_bytes) + "), got " +
             std::to_string(c.ps.partition_bytes));
  }
  const auto& wl = c.workload;
  if (wl.straggler_rank >= cl.num_workers) {
    fail("workload.straggler_rank", "cluster.workers",
         "expected -1 (none) or a rank below cluster.workers (" + std::to_string(cl.num_workers) + "), got " +
             std::to_string(wl.straggler_rank));
  }
  if (wl.dataset != "synthetic" && wl.data_path.empty()) {
    fail("workload.data_path", "workload.dataset",
         "expected a directory for dataset " + quote(wl.dataset) + ", got \"\"");
  }
  const auto& op = c.optimizer;
  if (op.name == "sgd" && op.nesterov && op.momentum == 0.0) {
    fail("optimizer.nesterov", "optimizer.momentum",
         "expected false when optimizer.momentum is 0 (Nesterov needs momentum), got true");
  }
  if (c.schedule.min_lr > op.lr) {
    fail("schedule.min_lr", "optimizer.lr",
         "expected at most optimizer.lr (" + format_bound(op.lr) + "), got " +
             format_bound(c.schedule.min_lr));
  }
  if (op.staleness_rule != "none" && c.mode != Mode::kAsync && c.mode != Mode::kSsp) {
    fail("optimizer.staleness_rule", "mode",
         "expected \"none\" when mode is " + quote(to_string(c.mode)) +
             " (pushes are stale only in \"async\" and \"ssp\"), got " + quote(op.staleness_rule));
  }
  if (c.collective.backend == "nccl" && wl.device == "cpu") {
    fail("collective.backend", "workload.device",
         "expected \"auto\" or \"gloo\" when workload.device is \"cpu\", got \"nccl\"");
  }
}

// ---- Overrides -------------------------------------------------------------------

std::string_view trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  const auto last = s.find_last_not_of(" \t");
  return s.substr(first, last - first + 1);
}

}  // namespace

std::string_view to_string(Mode mode) {
  switch (mode) {
    case Mode::kSync: return "sync";
    case Mode::kAsync: return "async";
    case Mode::kSsp: return "ssp";
    case Mode::kAllreduce: return "allreduce";
  }
  return "unknown";
}

RunConfig parse_config(std::string_view toml_text, const std::string& source_name) {
  // TOML allows no NUL byte anywhere; refuse it with its line before the
  // parser (whose debug build asserts on one inside a key: fuzz/config.cc).
  if (const auto nul = toml_text.find('\0'); nul != std::string_view::npos) {
    const auto line = 1 + std::count(toml_text.begin(), toml_text.begin() + static_cast<std::ptrdiff_t>(nul), '\n');
    throw ConfigError(source_name + ":" + std::to_string(line) + ": invalid TOML: a NUL byte (not a text file?)");
  }
  toml::table root;
  try {
    root = toml::parse(toml_text, source_name);
  } catch (const toml::parse_error& e) {
    const auto& pos = e.source().begin;
    throw ConfigError(source_name + ":" + std::to_string(pos.line) + ":" + std::to_string(pos.column) +
                      ": invalid TOML: " + std::string(e.description()));
  }
  check_known_keys(root, source_name);
  RunConfig config;
  config.source_path = source_name;
  std::map<std::string, std::uint32_t, std::less<>> lines;  // key -> line it was set on
  visit_fields(config, [&](std::string_view section, std::string_view key, FieldPtr field, const Rule& rule) {
    const toml::node* node = section.empty() ? root.get(key) : root[section][key].node();
    if (node == nullptr) return;
    const Site site{source_name, true, full_key(section, key)};
    lines[site.key] = node->source().begin.line;
    std::visit([&](auto* member) { read_value(*node, *member, rule, site); }, field);
  });
  check_consistency(config, [&](std::string_view key, std::string_view other) {
    auto it = lines.find(key);
    if (it == lines.end()) it = lines.find(other);
    return it == lines.end() ? source_name : source_name + ":" + std::to_string(it->second);
  });
  return config;
}

RunConfig load_config(const std::string& path) {
  const std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!file) {
    throw ConfigError(path + ": cannot open config file: " + std::generic_category().message(errno));
  }
  std::string text;
  std::array<char, 1 << 16> buffer{};
  std::size_t num_bytes = 0;
  while ((num_bytes = std::fread(buffer.data(), 1, buffer.size(), file.get())) > 0) {
    text.append(buffer.data(), num_bytes);
  }
  if (std::ferror(file.get())) {
    throw ConfigError(path + ": cannot read config file: " + std::generic_category().message(errno));
  }
  return parse_config(text, path);
}

namespace {

// Sets one "section.key=value" in `config` with the key's own rule; returns
// the full key name. The rules between keys are the caller's to check.
std::string set_override(RunConfig& config, std::string_view assignment, const std::string& origin) {
  const auto eq = assignment.find('=');
  if (eq == std::string_view::npos) throw ConfigError(origin + ": expected SECTION.KEY=VALUE, got no '='");
  const std::string_view name = trim(assignment.substr(0, eq));
  const std::string_view text = trim(assignment.substr(eq + 1));
  bool found = false;
  const auto set_named_field = [&](std::string_view section, std::string_view key, FieldPtr field,
                                   const Rule& rule) {
    if (full_key(section, key) != name) return;
    found = true;
    const Site site{origin, false, std::string(name)};
    read_override_value(field, text, rule, site);
  };
  visit_fields(config, set_named_field);
  if (!found) {
    const auto dot = name.find('.');
    const std::string_view section = dot == std::string_view::npos ? "" : name.substr(0, dot);
    const std::string_view key = dot == std::string_view::npos ? name : name.substr(dot + 1);
    const bool known_section = section.empty() || is_section(section);
    const std::string what = known_section ? unknown_key_text(section, key) : unknown_key_text("", section);
    throw ConfigError(origin + ": key '" + std::string(name) + "': " + what);
  }
  return std::string(name);
}

}  // namespace

void apply_override(RunConfig& config, std::string_view assignment) {
  const std::string one(assignment);
  apply_overrides(config, std::span<const std::string>(&one, 1));
}

void apply_overrides(RunConfig& config, std::span<const std::string> assignments) {
  RunConfig updated = config;
  std::map<std::string, std::string, std::less<>> origin_of;  // key -> the last --set that set it
  std::string last_origin;
  for (const std::string& assignment : assignments) {
    last_origin = "--set " + assignment;
    origin_of[set_override(updated, assignment, last_origin)] = last_origin;
  }
  if (assignments.empty()) return;
  // The rules between keys hold for the file (checked when it was parsed), so
  // a broken one involves a key set here: name that --set (the key's own if
  // both were set).
  check_consistency(updated, [&](std::string_view key, std::string_view other) {
    if (const auto it = origin_of.find(key); it != origin_of.end()) return it->second;
    if (const auto it = origin_of.find(other); it != origin_of.end()) return it->second;
    return last_origin;
  });
  config = std::move(updated);
}

std::string to_toml(const RunConfig& config) {
  std::ostringstream os;
  os << "# pstrain run config, fully resolved";
  if (!config.source_path.empty()) os << " from " << quote(config.source_path);
  os << '\n';
  std::string_view current_section;
  visit_fields(config, [&](std::string_view section, std::string_view key, ConstFieldPtr field, const Rule&) {
    if (section != current_section) {
      os << "\n[" << section << "]\n";
      current_section = section;
    }
    os << key << " = ";
    std::visit([&os](const auto* member) { write_value(os, *member); }, field);
    os << '\n';
  });
  return os.str();
}

}  // namespace pstrain
