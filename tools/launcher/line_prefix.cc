#include "tools/launcher/line_prefix.h"

#include <cctype>

#include "common/base/log.h"

namespace pstrain::launcher {

bool has_node_prefix(std::string_view line, std::string_view node_name) {
  if (line.empty() || line.front() != '[') return false;
  std::size_t i = 1;
  while (i < line.size() && line[i] == ' ') ++i;
  if (i < line.size() && line[i] == '-') ++i;  // a wall clock that stepped back
  const std::size_t digits_begin = i;
  while (i < line.size() && (std::isdigit(static_cast<unsigned char>(line[i])) != 0 || line[i] == '.')) ++i;
  if (i == digits_begin || i >= line.size() || line[i] != ' ') return false;
  const std::string_view rest = line.substr(i + 1);
  const std::string_view role = node_name.substr(0, node_name.find(' '));
  for (const std::string_view name : {node_name, role}) {
    if (rest.size() > name.size() && rest.substr(0, name.size()) == name && rest[name.size()] == ']') return true;
  }
  return false;
}

std::string echo_line(std::string_view line, std::string_view node_name, double now_s) {
  if (has_node_prefix(line, node_name)) return std::string(line);
  std::string out = log_prefix(now_s, node_name);
  out.append(line);
  return out;
}

}  // namespace pstrain::launcher
