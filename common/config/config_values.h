// Internal to the config parser (common/config*.cc); not part of the public
// API. Reading one TOML value into a config field (type and rule checks),
// writing one field back as TOML text, and the pieces of error texts:
// "FILE:LINE: key 'a.b': expected ..., got ...", "did you mean ...".
// Every failure throws ConfigError. Stateless; safe from any thread.
#pragma once

#include <toml++/toml.h>

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "common/config/config.h"
#include "common/config/config_fields.h"

namespace pstrain::config_detail {

// ---- Text ----------------------------------------------------------------------

std::string quote(std::string_view s);   // as a TOML basic string
std::string format_number(double x);     // shortest text that reads back exactly
std::string format_bound(double x);      // up to 15 significant digits
// The value as TOML text: strings double-quoted, floats in shortest form.
std::string repr(const toml::node& node);
// "a string \"abc\"", "an integer 3", "a table": what the file gave.
std::string describe(const toml::node& node);

// ---- Reading one value ---------------------------------------------------------

// Where an error points: a file (plus the node's line) or a --set override.
struct Site {
  std::string origin;
  bool has_lines = true;
  std::string key;  // full key, e.g. "workload.batch_size"

  // Throws ConfigError "ORIGIN[:LINE]: key 'KEY': WHAT".
  [[noreturn]] void fail(const toml::node& node, const std::string& what) const;
  // The site of element `index` of an array: key "KEY[index]".
  Site element(std::size_t index) const;
};

// What a field of this type accepts under rule `r`, e.g. "an integer >= 1".
std::string expected(std::int64_t, const Rule& r);
std::string expected(int, const Rule& r);
std::string expected(std::uint64_t, const Rule& r);
std::string expected(double, const Rule& r);
std::string expected(bool, const Rule& r);
std::string expected(Mode, const Rule& r);
std::string expected(WorkerFailurePolicy, const Rule& r);
std::string expected(ServerFailurePolicy, const Rule& r);
std::string expected(const std::string&, const Rule& r);
std::string expected(const std::vector<std::string>&, const Rule& r);
std::string expected(const std::vector<double>&, const Rule& r);

// Sets `out` from `node`, or throws (via site.fail) naming what was expected
// and what was given; `out` is left unchanged on failure.
void read_value(const toml::node& node, int& out, const Rule& r, const Site& site);
void read_value(const toml::node& node, std::int64_t& out, const Rule& r, const Site& site);
void read_value(const toml::node& node, std::uint64_t& out, const Rule& r, const Site& site);
void read_value(const toml::node& node, double& out, const Rule& r, const Site& site);
void read_value(const toml::node& node, bool& out, const Rule& r, const Site& site);
void read_value(const toml::node& node, std::string& out, const Rule& r, const Site& site);
void read_value(const toml::node& node, Mode& out, const Rule& r, const Site& site);
void read_value(const toml::node& node, WorkerFailurePolicy& out, const Rule& r, const Site& site);
void read_value(const toml::node& node, ServerFailurePolicy& out, const Rule& r, const Site& site);
void read_value(const toml::node& node, std::vector<std::string>& out, const Rule& r, const Site& site);
void read_value(const toml::node& node, std::vector<double>& out, const Rule& r, const Site& site);

// Sets `field` from the TEXT of a --set override, parsed as one TOML value;
// for string fields, text that is not a TOML string is taken literally.
void read_override_value(FieldPtr field, std::string_view text, const Rule& r, const Site& site);

// ---- Writing one value ---------------------------------------------------------

// Writes the value as TOML text that read_value reads back unchanged.
void write_value(std::ostream& os, int x);
void write_value(std::ostream& os, std::int64_t x);
void write_value(std::ostream& os, std::uint64_t x);
void write_value(std::ostream& os, double x);
void write_value(std::ostream& os, bool x);
void write_value(std::ostream& os, const std::string& x);
void write_value(std::ostream& os, Mode x);
void write_value(std::ostream& os, WorkerFailurePolicy x);
void write_value(std::ostream& os, ServerFailurePolicy x);
void write_value(std::ostream& os, const std::vector<std::string>& items);
void write_value(std::ostream& os, const std::vector<double>& items);

// ---- Nearest-name suggestions ------------------------------------------------------

// Keeps the candidate closest to `typed` (optimal string alignment distance),
// if near enough to be a typo: at most max(1, typed.size() / 3) edits.
class Closest {
 public:
  explicit Closest(std::string_view typed) : typed_(typed) {}

  // `full_name` is what best() reports when `candidate` is the nearest so far.
  void offer(std::string_view candidate, std::string full_name);
  // The nearest full name offered, or "" when none was near.
  const std::string& best() const { return best_; }
  // Sets the result when none was near (a fallback suggestion).
  void set_if_none(std::string full_name);

 private:
  std::string_view typed_;
  std::string best_;
  std::size_t best_distance_ = 0;
};

}  // namespace pstrain::config_detail
