// Where a config key got its value, for the launcher's own checks (the
// config parser reports its errors itself): "FILE:LINE" when the file sets
// it, "--set KEY=VALUE" when an override does (the last such one), or
// "FILE" when the default applies.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace pstrain::launcher {

// `dotted_key` is "section.key" (or "key" at the top level).
std::string key_site(const std::string& config_path, const std::vector<std::string>& overrides,
                     std::string_view dotted_key);
// Whether the file or an override sets `dotted_key` (else its default applies).
bool key_set(const std::string& config_path, const std::vector<std::string>& overrides, std::string_view dotted_key);

}  // namespace pstrain::launcher
