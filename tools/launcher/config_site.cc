#include "tools/launcher/config_site.h"

#include <toml++/toml.h>

namespace pstrain::launcher {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The line of `dotted_key` in the file, or 0 when the file does not set it.
std::uint32_t line_in_file(const std::string& config_path, std::string_view dotted_key) {
  try {
    const toml::table doc = toml::parse_file(config_path);
    const toml::node_view<const toml::node> node = doc.at_path(dotted_key);
    return node ? node.node()->source().begin.line : 0;
  } catch (const toml::parse_error&) {
    return 0;  // the config loader reports syntax errors itself
  }
}

}  // namespace

std::string key_site(const std::string& config_path, const std::vector<std::string>& overrides,
                     std::string_view dotted_key) {
  for (auto it = overrides.rbegin(); it != overrides.rend(); ++it) {
    const auto eq = it->find('=');
    if (eq != std::string::npos && trim(std::string_view(*it).substr(0, eq)) == dotted_key) return "--set " + *it;
  }
  const std::uint32_t line = line_in_file(config_path, dotted_key);
  return line > 0 ? config_path + ":" + std::to_string(line) : config_path;
}

bool key_set(const std::string& config_path, const std::vector<std::string>& overrides, std::string_view dotted_key) {
  return key_site(config_path, overrides, dotted_key) != config_path;
}

}  // namespace pstrain::launcher
