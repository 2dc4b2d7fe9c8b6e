// Run config parsing. One table of fields (section, key, member, rule) in
// visit_fields() drives reading, --set overrides and writing, so the three
// cannot drift apart; check_consistency() holds the rules between fields.
#include "common/config.h"

#include <toml++/toml.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <sstream>
#include <system_error>
#include <type_traits>

#include "common/errors.h"

namespace pstrain {
namespace {

using Choices = std::span<const std::string_view>;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr std::array<std::string_view, 3> kModes{"sync", "async", "allreduce"};
constexpr std::array<std::string_view, 2> kTransports{"tcp", "ipc"};
constexpr std::array<std::string_view, 4> kDatasets{"fashion-mnist", "mnist", "cifar10", "synthetic"};
constexpr std::array<std::string_view, 3> kDevices{"auto", "cpu", "cuda"};
constexpr std::array<std::string_view, 2> kOptimizers{"sgd", "adam"};
constexpr std::array<std::string_view, 3> kDecays{"none", "step", "cosine"};
constexpr std::array<std::string_view, 3> kBackends{"auto", "gloo", "nccl"};
constexpr std::array<std::string_view, 4> kLogLevels{"debug", "info", "warn", "error"};
constexpr std::array<std::string_view, 7> kSections{"cluster",  "ps",         "workload", "optimizer",
                                                    "schedule", "collective", "output"};

// What a value must satisfy besides its type: bounds for numbers (each
// element of a number array), the allowed list or shape for strings.
struct Rule {
  double min = -kInf;
  double max = kInf;
  bool min_open = false;  // min itself is excluded
  bool max_open = false;
  std::int64_t multiple_of = 1;
  Choices choices = {};  // empty: any string
  bool non_empty = false;
  bool endpoint = false;  // "tcp://HOST:PORT" or "ipc://PATH"
};

constexpr Rule at_least(double min) { return Rule{.min = min}; }
constexpr Rule above(double min) { return Rule{.min = min, .min_open = true}; }
constexpr Rule unit_interval() { return Rule{.min = 0, .max = 1, .max_open = true}; }
constexpr Rule one_of(Choices choices) { return Rule{.choices = choices}; }

// Calls v(section, key, field, rule) for every config key, in file order.
// Top-level keys have section "". C is RunConfig or const RunConfig.
template <class C, class V>
void visit_fields(C& c, V&& v) {
  v("", "mode", c.mode, one_of(kModes));
  auto& cl = c.cluster;
  v("cluster", "scheduler", cl.scheduler, Rule{.endpoint = true});
  v("cluster", "transport", cl.transport, one_of(kTransports));
  v("cluster", "servers", cl.num_servers, at_least(0));
  v("cluster", "workers", cl.num_workers, at_least(1));
  v("cluster", "server_hosts", cl.server_hosts, Rule{});
  v("cluster", "worker_hosts", cl.worker_hosts, Rule{});
  v("cluster", "server_port", cl.server_port, Rule{.min = 0, .max = 65535});
  v("cluster", "heartbeat_interval_ms", cl.heartbeat_interval_ms, at_least(1));
  v("cluster", "heartbeat_timeout_ms", cl.heartbeat_timeout_ms, at_least(1));
  v("cluster", "timeout_ms", cl.timeout_ms, at_least(1));
  v("cluster", "max_message_bytes", cl.max_message_bytes, at_least(1));
  v("ps", "partition_bytes", c.ps.partition_bytes, Rule{.min = 4, .multiple_of = 4});
  auto& wl = c.workload;
  v("workload", "model", wl.model, Rule{.non_empty = true});
  v("workload", "dataset", wl.dataset, one_of(kDatasets));
  v("workload", "data_path", wl.data_path, Rule{});
  v("workload", "batch_size", wl.batch_size, at_least(1));
  v("workload", "epochs", wl.epochs, at_least(1));
  v("workload", "max_steps", wl.max_steps, at_least(0));
  v("workload", "seed", wl.seed, at_least(0));
  v("workload", "device", wl.device, one_of(kDevices));
  v("workload", "threads", wl.threads, at_least(0));
  v("workload", "synthetic_train", wl.synthetic_train, at_least(1));
  v("workload", "synthetic_test", wl.synthetic_test, at_least(1));
  v("workload", "straggler_rank", wl.straggler_rank, at_least(-1));
  v("workload", "straggler_slowdown", wl.straggler_slowdown, at_least(1));
  v("workload", "simulated_step_ms", wl.simulated_step_ms, at_least(0));
  auto& op = c.optimizer;
  v("optimizer", "name", op.name, one_of(kOptimizers));
  v("optimizer", "lr", op.lr, above(0));
  v("optimizer", "momentum", op.momentum, unit_interval());
  v("optimizer", "weight_decay", op.weight_decay, at_least(0));
  v("optimizer", "nesterov", op.nesterov, Rule{});
  v("optimizer", "beta1", op.beta1, unit_interval());
  v("optimizer", "beta2", op.beta2, unit_interval());
  v("optimizer", "epsilon", op.epsilon, above(0));
  auto& sc = c.schedule;
  v("schedule", "decay", sc.decay, one_of(kDecays));
  v("schedule", "warmup_epochs", sc.warmup_epochs, at_least(0));
  v("schedule", "step_epochs", sc.step_epochs, above(0));
  v("schedule", "gamma", sc.gamma, Rule{.min = 0, .max = 1, .min_open = true});
  v("schedule", "min_lr", sc.min_lr, at_least(0));
  v("schedule", "linear_scaling", sc.linear_scaling, Rule{});
  v("schedule", "base_batch", sc.base_batch, at_least(1));
  v("collective", "backend", c.collective.backend, one_of(kBackends));
  v("collective", "bucket_bytes", c.collective.bucket_bytes, at_least(1));
  v("output", "run_dir", c.output.run_dir, Rule{.non_empty = true});
  v("output", "log_level", c.output.log_level, one_of(kLogLevels));
}

std::string full_key(std::string_view section, std::string_view key) {
  return section.empty() ? std::string(key) : std::string(section) + "." + std::string(key);
}

// ---- Text helpers ------------------------------------------------------------

std::string quote(std::string_view s) {  // as a TOML basic string
  std::string out = "\"";
  for (const char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(u));
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

std::string format_number(double x) {  // shortest text that reads back exactly
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, x);
  std::string text(buf, res.ptr);
  if (text.find_first_of(".eainf") == std::string::npos) text += ".0";
  return text;
}

std::string format_bound(double x) {
  std::ostringstream os;
  os.precision(15);
  os << x;
  return os.str();
}

// The value as TOML text: strings double-quoted, floats in shortest form.
std::string repr(const toml::node& node) {
  if (const auto* s = node.as_string()) return quote(s->get());
  if (const auto* f = node.as_floating_point()) return format_number(f->get());
  if (const auto* array = node.as_array()) {
    std::string out = "[";
    for (std::size_t i = 0; i < array->size(); ++i) out += (i > 0 ? ", " : "") + repr((*array)[i]);
    return out + "]";
  }
  if (node.is_table()) return "{...}";
  std::ostringstream os;
  node.visit([&os](const auto& n) { os << n; });
  return os.str();
}

// "a string \"abc\"", "an integer 3", "a table": what the file gave.
std::string describe(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array " + repr(node);
    case toml::node_type::string: return "a string " + repr(node);
    case toml::node_type::integer: return "an integer " + repr(node);
    case toml::node_type::floating_point: return "a float " + repr(node);
    case toml::node_type::boolean: return "a boolean " + repr(node);
    case toml::node_type::date: return "a date " + repr(node);
    case toml::node_type::time: return "a time " + repr(node);
    case toml::node_type::date_time: return "a date-time " + repr(node);
    default: return "nothing";
  }
}

std::string join(Choices items, bool quoted) {
  std::string out;
  for (const auto item : items) {
    out += out.empty() ? "" : ", ";
    out += quoted ? quote(item) : std::string(item);
  }
  return out;
}

std::string range_text(const Rule& r) {
  const bool lo = std::isfinite(r.min);
  const bool hi = std::isfinite(r.max);
  std::string t;
  if (lo && hi) {
    t = std::string(" in ") + (r.min_open ? "(" : "[") + format_bound(r.min) + ", " + format_bound(r.max) +
        (r.max_open ? ")" : "]");
  } else if (lo) {
    t = (r.min_open ? " > " : " >= ") + format_bound(r.min);
  } else if (hi) {
    t = (r.max_open ? " < " : " <= ") + format_bound(r.max);
  }
  if (r.multiple_of > 1) t += " and a multiple of " + std::to_string(r.multiple_of);
  return t;
}

bool in_range(double x, const Rule& r) {
  const bool lo_ok = r.min_open ? x > r.min : x >= r.min;
  const bool hi_ok = r.max_open ? x < r.max : x <= r.max;
  return lo_ok && hi_ok;
}

// Optimal string alignment distance: edits plus adjacent transpositions.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  const std::size_t cols = b.size() + 1;
  std::vector<std::size_t> d((a.size() + 1) * cols);
  const auto at = [&d, cols](std::size_t i, std::size_t j) -> std::size_t& { return d[i * cols + j]; };
  for (std::size_t i = 0; i <= a.size(); ++i) at(i, 0) = i;
  for (std::size_t j = 0; j <= b.size(); ++j) at(0, j) = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      at(i, j) = std::min({at(i - 1, j) + 1, at(i, j - 1) + 1, at(i - 1, j - 1) + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        at(i, j) = std::min(at(i, j), at(i - 2, j - 2) + 1);
      }
    }
  }
  return at(a.size(), b.size());
}

bool is_endpoint(std::string_view s) {
  if (s.starts_with("ipc://")) return s.size() > 6;
  if (!s.starts_with("tcp://")) return false;
  const auto colon = s.rfind(':');
  if (colon <= 6) return false;  // no host, or only the scheme's colon
  const std::string_view port = s.substr(colon + 1);
  int value = -1;
  const auto res = std::from_chars(port.data(), port.data() + port.size(), value);
  return res.ec == std::errc{} && res.ptr == port.data() + port.size() && value >= 0 && value <= 65535;
}

// ---- Reading one value ---------------------------------------------------------

// Where an error points: a file (plus the node's line) or a --set override.
struct Site {
  std::string origin;
  bool has_lines = true;
  std::string key;  // full key, e.g. "workload.batch_size"

  [[noreturn]] void fail(const toml::node& node, const std::string& what) const {
    const std::string where = has_lines ? origin + ":" + std::to_string(node.source().begin.line) : origin;
    throw ConfigError(where + ": key '" + key + "': " + what);
  }
  Site element(std::size_t index) const {
    return Site{origin, has_lines, key + "[" + std::to_string(index) + "]"};
  }
};

std::string expected(std::int64_t, const Rule& r) { return "an integer" + range_text(r); }
std::string expected(int, const Rule& r) { return expected(std::int64_t{0}, r); }
std::string expected(std::uint64_t, const Rule& r) { return expected(std::int64_t{0}, r); }
std::string expected(double, const Rule& r) { return "a number" + range_text(r); }
std::string expected(bool, const Rule&) { return "a boolean (true or false)"; }
std::string expected(Mode, const Rule& r) { return "one of " + join(r.choices, true); }
std::string expected(const std::vector<std::string>&, const Rule&) { return "an array of non-empty strings"; }
std::string expected(const std::vector<double>&, const Rule& r) {
  return "an array of numbers" + range_text(r) + " in increasing order";
}
std::string expected(const std::string&, const Rule& r) {
  if (!r.choices.empty()) return "one of " + join(r.choices, true);
  if (r.endpoint) return "an endpoint \"tcp://HOST:PORT\" or \"ipc://PATH\"";
  return r.non_empty ? "a non-empty string" : "a string";
}

std::int64_t read_integer(const toml::node& node, const Rule& r, const Site& site, std::int64_t lo,
                          std::int64_t hi) {
  const auto* value = node.as_integer();
  if (value == nullptr)
    site.fail(node, "expected " + expected(std::int64_t{0}, r) + ", got " + describe(node));
  const std::int64_t x = value->get();
  if (!in_range(static_cast<double>(x), r) || x % r.multiple_of != 0) {
    site.fail(node, "expected " + expected(std::int64_t{0}, r) + ", got " + std::to_string(x));
  }
  if (x < lo || x > hi) {
    site.fail(node, "expected " + expected(std::int64_t{0}, r) + " of at most " + std::to_string(hi) +
                        ", got " + std::to_string(x));
  }
  return x;
}

double read_number(const toml::node& node, const Rule& r, const Site& site) {
  double x = 0.0;
  if (const auto* i = node.as_integer()) {
    x = static_cast<double>(i->get());
  } else if (const auto* f = node.as_floating_point()) {
    x = f->get();
  } else {
    site.fail(node, "expected " + expected(0.0, r) + ", got " + describe(node));
  }
  if (!std::isfinite(x) || !in_range(x, r)) {
    site.fail(node, "expected " + expected(0.0, r) + ", got " + repr(node));
  }
  return x;
}

void read_value(const toml::node& node, int& out, const Rule& r, const Site& site) {
  out = static_cast<int>(read_integer(node, r, site, INT_MIN, INT_MAX));
}
void read_value(const toml::node& node, std::int64_t& out, const Rule& r, const Site& site) {
  out = read_integer(node, r, site, INT64_MIN, INT64_MAX);
}
void read_value(const toml::node& node, std::uint64_t& out, const Rule& r, const Site& site) {
  out = static_cast<std::uint64_t>(read_integer(node, r, site, 0, INT64_MAX));
}
void read_value(const toml::node& node, double& out, const Rule& r, const Site& site) {
  out = read_number(node, r, site);
}
void read_value(const toml::node& node, bool& out, const Rule& r, const Site& site) {
  const auto* value = node.as_boolean();
  if (value == nullptr) site.fail(node, "expected " + expected(out, r) + ", got " + describe(node));
  out = value->get();
}

void read_value(const toml::node& node, std::string& out, const Rule& r, const Site& site) {
  const auto* value = node.as_string();
  if (value == nullptr) site.fail(node, "expected " + expected(out, r) + ", got " + describe(node));
  const std::string& s = value->get();
  const bool listed =
      r.choices.empty() || std::find(r.choices.begin(), r.choices.end(), s) != r.choices.end();
  if (!listed || (r.non_empty && s.empty()) || (r.endpoint && !is_endpoint(s))) {
    site.fail(node, "expected " + expected(out, r) + ", got " + quote(s));
  }
  out = s;
}

void read_value(const toml::node& node, Mode& out, const Rule& r, const Site& site) {
  std::string name;
  read_value(node, name, r, site);
  out = name == "async" ? Mode::kAsync : name == "allreduce" ? Mode::kAllreduce : Mode::kSync;
}

void read_value(const toml::node& node, std::vector<std::string>& out, const Rule& r, const Site& site) {
  const auto* array = node.as_array();
  if (array == nullptr) site.fail(node, "expected " + expected(out, r) + ", got " + describe(node));
  std::vector<std::string> items;
  for (std::size_t i = 0; i < array->size(); ++i) {
    std::string item;
    read_value((*array)[i], item, Rule{.non_empty = true}, site.element(i));
    items.push_back(std::move(item));
  }
  out = std::move(items);
}

void read_value(const toml::node& node, std::vector<double>& out, const Rule& r, const Site& site) {
  const auto* array = node.as_array();
  if (array == nullptr) site.fail(node, "expected " + expected(out, r) + ", got " + describe(node));
  std::vector<double> items;
  for (std::size_t i = 0; i < array->size(); ++i) {
    const toml::node& element = (*array)[i];
    const double x = read_number(element, r, site.element(i));
    if (!items.empty() && x <= items.back()) {
      site.element(i).fail(element, "expected a number greater than the previous element (" +
                                        format_bound(items.back()) + "), got " + repr(element));
    }
    items.push_back(x);
  }
  out = std::move(items);
}

// ---- Writing one value ---------------------------------------------------------

void write_value(std::ostream& os, int x) { os << x; }
void write_value(std::ostream& os, std::int64_t x) { os << x; }
void write_value(std::ostream& os, std::uint64_t x) { os << x; }
void write_value(std::ostream& os, double x) { os << format_number(x); }
void write_value(std::ostream& os, bool x) { os << (x ? "true" : "false"); }
void write_value(std::ostream& os, const std::string& x) { os << quote(x); }
void write_value(std::ostream& os, Mode x) { os << quote(to_string(x)); }
template <class T>
void write_value(std::ostream& os, const std::vector<T>& items) {
  os << '[';
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) os << ", ";
    write_value(os, items[i]);
  }
  os << ']';
}

// ---- Unknown keys ----------------------------------------------------------------

struct KnownKey {
  std::string_view section;
  std::string_view key;
};

std::vector<KnownKey> known_keys() {
  RunConfig defaults;
  std::vector<KnownKey> keys;
  visit_fields(defaults, [&keys](std::string_view section, std::string_view key, auto&, const Rule&) {
    keys.push_back({section, key});
  });
  return keys;
}

// Keeps the candidate closest to `typed`, if near enough to be a typo.
struct Closest {
  std::string_view typed;
  std::string best = {};
  std::size_t best_distance = 0;

  void offer(std::string_view candidate, std::string full_name) {
    const std::size_t d = edit_distance(typed, candidate);
    const bool near = d <= std::max<std::size_t>(1, typed.size() / 3);
    if (near && (best.empty() || d < best_distance)) {
      best = std::move(full_name);
      best_distance = d;
    }
  }
};

// The error for `name` (a key of `section`, or top-level when section is
// ""), with the closest known name when one is near.
std::string unknown_key_text(std::string_view section, std::string_view name) {
  Closest closest{name};
  std::string listing;
  for (const KnownKey& k : known_keys()) {
    if (k.section != section) continue;
    listing += (listing.empty() ? "" : ", ") + std::string(k.key);
    closest.offer(k.key, full_key(section, k.key));
  }
  if (section.empty()) {
    for (const auto s : kSections) {
      listing += ", [" + std::string(s) + "]";
      closest.offer(s, std::string(s));
    }
  }
  for (const KnownKey& k : known_keys()) {  // right key, wrong section
    if (closest.best.empty() && k.section != section && k.key == name) {
      closest.best = full_key(k.section, k.key);
    }
  }
  const std::string what = section.empty() ? "unknown top-level key" : "unknown key";
  if (!closest.best.empty()) return what + "; did you mean '" + closest.best + "'?";
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
    if (std::find(kSections.begin(), kSections.end(), name) == kSections.end()) {
      site.fail(top_node, unknown_key_text("", name));
    }
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
  if (cl.heartbeat_timeout_ms <= cl.heartbeat_interval_ms) {
    fail("cluster.heartbeat_timeout_ms", "cluster.heartbeat_interval_ms",
         "expected more than cluster.heartbeat_interval_ms (" + std::to_string(cl.heartbeat_interval_ms) +
             "), got " + std::to_string(cl.heartbeat_timeout_ms));
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

// "v = TEXT" parsed as TOML; nullopt when TEXT is not one TOML value.
std::optional<toml::table> parse_override_value(std::string_view text) {
  if (text.find_first_of("\r\n") != std::string_view::npos) return std::nullopt;
  try {
    toml::table doc = toml::parse("v = " + std::string(text));
    if (doc.size() == 1 && doc.contains("v")) return doc;
  } catch (const toml::parse_error&) {
  }
  return std::nullopt;
}

template <class T>
constexpr bool kIsStringField = std::is_same_v<T, std::string> || std::is_same_v<T, Mode>;

}  // namespace

std::string_view to_string(Mode mode) {
  switch (mode) {
    case Mode::kSync: return "sync";
    case Mode::kAsync: return "async";
    case Mode::kAllreduce: return "allreduce";
  }
  return "unknown";
}

RunConfig parse_config(std::string_view toml_text, const std::string& source_name) {
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
  visit_fields(config, [&](std::string_view section, std::string_view key, auto& field, const Rule& rule) {
    const toml::node* node = section.empty() ? root.get(key) : root[section][key].node();
    if (node == nullptr) return;
    const Site site{source_name, true, full_key(section, key)};
    lines[site.key] = node->source().begin.line;
    read_value(*node, field, rule, site);
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

void apply_override(RunConfig& config, std::string_view assignment) {
  const std::string origin = "--set " + std::string(assignment);
  const auto eq = assignment.find('=');
  if (eq == std::string_view::npos) throw ConfigError(origin + ": expected SECTION.KEY=VALUE, got no '='");
  const std::string_view name = trim(assignment.substr(0, eq));
  const std::string_view text = trim(assignment.substr(eq + 1));
  RunConfig updated = config;
  bool found = false;
  visit_fields(updated, [&](std::string_view section, std::string_view key, auto& field, const Rule& rule) {
    if (full_key(section, key) != name) return;
    found = true;
    const Site site{origin, false, std::string(name)};
    std::optional<toml::table> doc = parse_override_value(text);
    using Field = std::remove_reference_t<decltype(field)>;
    if constexpr (kIsStringField<Field>) {  // unquoted text is taken literally
      if (!doc || !doc->get("v")->is_string()) doc = toml::table{{"v", std::string(text)}};
    }
    if (!doc) {
      throw ConfigError(origin + ": key '" + site.key + "': expected " + expected(field, rule) + ", got " +
                        std::string(text) + " (not a TOML value)");
    }
    read_value(*doc->get("v"), field, rule, site);
  });
  if (!found) {
    const auto dot = name.find('.');
    const std::string_view section = dot == std::string_view::npos ? "" : name.substr(0, dot);
    const std::string_view key = dot == std::string_view::npos ? name : name.substr(dot + 1);
    const bool known_section =
        section.empty() || std::find(kSections.begin(), kSections.end(), section) != kSections.end();
    const std::string what = known_section ? unknown_key_text(section, key) : unknown_key_text("", section);
    throw ConfigError(origin + ": key '" + std::string(name) + "': " + what);
  }
  check_consistency(updated, [&origin](std::string_view, std::string_view) { return origin; });
  config = std::move(updated);
}

std::string to_toml(const RunConfig& config) {
  std::ostringstream os;
  os << "# pstrain run config, fully resolved";
  if (!config.source_path.empty()) os << " from " << quote(config.source_path);
  os << '\n';
  std::string_view current_section;
  visit_fields(config, [&](std::string_view section, std::string_view key, const auto& field, const Rule&) {
    if (section != current_section) {
      os << "\n[" << section << "]\n";
      current_section = section;
    }
    os << key << " = ";
    write_value(os, field);
    os << '\n';
  });
  return os.str();
}

}  // namespace pstrain
