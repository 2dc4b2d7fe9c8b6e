// Formatting of JSON scalars for the report writers: quoted strings and
// numbers (non-finite or absent values become null, as JSON has no NaN).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace pstrain::report {

// "text" with ", \, and control characters escaped.
std::string json_quote(std::string_view text);
// Shortest %g text with 9 significant digits; null when not finite.
std::string json_number(double x);
std::string json_number(std::int64_t x);
std::string json_number(const std::optional<double>& x);

}  // namespace pstrain::report
