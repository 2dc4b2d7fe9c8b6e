// Reading, writing and describing single config values; see config_values.h.
#include "common/config/config_values.h"

#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdio>
#include <optional>
#include <sstream>
#include <system_error>
#include <type_traits>
#include <utility>
#include <variant>

#include "common/base/endpoint_address.h"
#include "common/base/errors.h"

namespace pstrain::config_detail {
namespace {

// "\"a\", \"b\"": the choices quoted, comma-separated.
std::string quoted_list(Choices items) {
  std::string out;
  for (const auto item : items) {
    out += out.empty() ? "" : ", ";
    out += quote(item);
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

// "v = TEXT" parsed as TOML; nullopt when TEXT is not one TOML value.
std::optional<toml::table> parse_override_text(std::string_view text) {
  if (text.find_first_of("\r\n") != std::string_view::npos) return std::nullopt;
  try {
    toml::table doc = toml::parse("v = " + std::string(text));
    if (doc.size() == 1 && doc.contains("v")) return doc;
  } catch (const toml::parse_error&) {
  }
  return std::nullopt;
}

template <class T>
constexpr bool kIsStringField = std::is_same_v<T, std::string> || std::is_same_v<T, Mode> || NamedEnum<T>;

// A named enum's value from a string listed in r.choices (its names).
template <NamedEnum E>
void read_named(const toml::node& node, E& out, const Rule& r, const Site& site) {
  std::string name;
  read_value(node, name, r, site);
  const std::optional<E> value = parse_enum<E>(name);
  if (!value) site.fail(node, "expected " + expected(out, r) + ", got " + quote(name));
  out = *value;
}

// read_value() of an override's TEXT; a string field takes text that is
// not a TOML string literally.
template <class T>
void read_override(T& field, std::string_view text, const Rule& rule, const Site& site) {
  std::optional<toml::table> doc = parse_override_text(text);
  if constexpr (kIsStringField<T>) {
    if (!doc || !doc->get("v")->is_string()) doc = toml::table{{"v", std::string(text)}};
  }
  if (!doc) {
    throw ConfigError(site.origin + ": key '" + site.key + "': expected " + expected(field, rule) + ", got " +
                      std::string(text) + " (not a TOML value)");
  }
  read_value(*doc->get("v"), field, rule, site);
}

template <class T>
void write_array(std::ostream& os, const std::vector<T>& items) {
  os << '[';
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) os << ", ";
    write_value(os, items[i]);
  }
  os << ']';
}

}  // namespace

std::string quote(std::string_view s) {
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

std::string format_number(double x) {
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

void Site::fail(const toml::node& node, const std::string& what) const {
  const std::string where = has_lines ? origin + ":" + std::to_string(node.source().begin.line) : origin;
  throw ConfigError(where + ": key '" + key + "': " + what);
}

Site Site::element(std::size_t index) const {
  return Site{origin, has_lines, key + "[" + std::to_string(index) + "]"};
}

std::string expected(std::int64_t, const Rule& r) { return "an integer" + range_text(r); }
std::string expected(int, const Rule& r) { return expected(std::int64_t{0}, r); }
std::string expected(std::uint64_t, const Rule& r) { return expected(std::int64_t{0}, r); }
std::string expected(double, const Rule& r) { return "a number" + range_text(r); }
std::string expected(bool, const Rule&) { return "a boolean (true or false)"; }
std::string expected(Mode, const Rule& r) { return "one of " + quoted_list(r.choices); }
std::string expected(WorkerFailurePolicy, const Rule& r) { return "one of " + quoted_list(r.choices); }
std::string expected(ServerFailurePolicy, const Rule& r) { return "one of " + quoted_list(r.choices); }
std::string expected(const std::vector<std::string>&, const Rule&) { return "an array of non-empty strings"; }
std::string expected(const std::vector<double>&, const Rule& r) {
  return "an array of numbers" + range_text(r) + " in increasing order";
}
std::string expected(const std::string&, const Rule& r) {
  if (!r.choices.empty()) return "one of " + quoted_list(r.choices);
  if (r.endpoint) return "an endpoint \"tcp://HOST:PORT\" or \"ipc://PATH\"";
  return r.non_empty ? "a non-empty string" : "a string";
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
  out = name == "async"       ? Mode::kAsync
        : name == "ssp"       ? Mode::kSsp
        : name == "allreduce" ? Mode::kAllreduce
                              : Mode::kSync;
}

void read_value(const toml::node& node, WorkerFailurePolicy& out, const Rule& r, const Site& site) {
  read_named(node, out, r, site);
}
void read_value(const toml::node& node, ServerFailurePolicy& out, const Rule& r, const Site& site) {
  read_named(node, out, r, site);
}

void read_value(const toml::node& node, std::vector<std::string>& out, const Rule& r, const Site& site) {
  const auto* array = node.as_array();
  if (array == nullptr) site.fail(node, "expected " + expected(out, r) + ", got " + describe(node));
  Rule element_rule;
  element_rule.non_empty = true;
  std::vector<std::string> items;
  for (std::size_t i = 0; i < array->size(); ++i) {
    std::string item;
    read_value((*array)[i], item, element_rule, site.element(i));
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

void read_override_value(FieldPtr field, std::string_view text, const Rule& r, const Site& site) {
  std::visit([&](auto* member) { read_override(*member, text, r, site); }, field);
}

void write_value(std::ostream& os, int x) { os << x; }
void write_value(std::ostream& os, std::int64_t x) { os << x; }
void write_value(std::ostream& os, std::uint64_t x) { os << x; }
void write_value(std::ostream& os, double x) { os << format_number(x); }
void write_value(std::ostream& os, bool x) { os << (x ? "true" : "false"); }
void write_value(std::ostream& os, const std::string& x) { os << quote(x); }
void write_value(std::ostream& os, Mode x) { os << quote(to_string(x)); }
void write_value(std::ostream& os, WorkerFailurePolicy x) { os << quote(to_string(x)); }
void write_value(std::ostream& os, ServerFailurePolicy x) { os << quote(to_string(x)); }

void write_value(std::ostream& os, const std::vector<std::string>& items) { write_array(os, items); }
void write_value(std::ostream& os, const std::vector<double>& items) { write_array(os, items); }

void Closest::offer(std::string_view candidate, std::string full_name) {
  const std::size_t d = edit_distance(typed_, candidate);
  const bool near = d <= std::max<std::size_t>(1, typed_.size() / 3);
  if (near && (best_.empty() || d < best_distance_)) {
    best_ = std::move(full_name);
    best_distance_ = d;
  }
}

void Closest::set_if_none(std::string full_name) {
  if (best_.empty()) best_ = std::move(full_name);
}

}  // namespace pstrain::config_detail
