// Internal to the config parser (common/config*.cc); not part of the public
// API. The table of run-config keys: each key's section, name, the
// RunConfig member it sets (which fixes its type) and the rule its value
// must satisfy. Reading, --set overrides and writing all walk this one
// table, so they cannot drift apart.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/config/config.h"

namespace pstrain::config_detail {

using Choices = std::span<const std::string_view>;

// What a value must satisfy besides its type: bounds for numbers (each
// element of a number array), the allowed list or shape for strings.
struct Rule {
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  bool min_open = false;  // min itself is excluded
  bool max_open = false;
  std::int64_t multiple_of = 1;
  Choices choices = {};  // empty: any string
  bool non_empty = false;
  bool endpoint = false;  // "tcp://HOST:PORT" or "ipc://PATH"
};

// A pointer to the RunConfig member a key sets; the alternative is the type.
template <template <class> class Ptr>
using FieldPtrOf = std::variant<Ptr<int>, Ptr<std::int64_t>, Ptr<std::uint64_t>, Ptr<double>, Ptr<bool>,
                                Ptr<std::string>, Ptr<Mode>, Ptr<WorkerFailurePolicy>,
                                Ptr<ServerFailurePolicy>, Ptr<std::vector<std::string>>,
                                Ptr<std::vector<double>>>;
template <class T>
using MutablePtr = T*;
template <class T>
using ConstPtr = const T*;
using FieldPtr = FieldPtrOf<MutablePtr>;
using ConstFieldPtr = FieldPtrOf<ConstPtr>;

// Called once per key, in file order; top-level keys have section "".
// The pointer is valid while the RunConfig passed to visit_fields is.
using FieldVisitor = std::function<void(std::string_view section, std::string_view key, FieldPtr field,
                                        const Rule& rule)>;
using ConstFieldVisitor = std::function<void(std::string_view section, std::string_view key,
                                             ConstFieldPtr field, const Rule& rule)>;

void visit_fields(RunConfig& config, const FieldVisitor& visitor);
void visit_fields(const RunConfig& config, const ConstFieldVisitor& visitor);

// The section names ("cluster", "ps", ...), in file order.
Choices section_names();
bool is_section(std::string_view name);

}  // namespace pstrain::config_detail
