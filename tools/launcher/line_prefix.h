// One prefix per echoed line. The nodes' loggers already start their lines
// with "[    1.234 worker 0] " (common/base/log.h, time on the job clock); the
// launcher echoes those as they are and gives every other line (library
// output, crash text, "pstrain-worker: error: ...") the same prefix with the
// job-clock time at which it read the line. The launcher's own messages use
// it too, named "launch".
#pragma once

#include <string>
#include <string_view>

namespace pstrain::launcher {

// Whether `line` starts with a logger prefix "[<seconds> <name>] " of this
// node: <name> is the node's name ("server 0") or its role, the name's first
// word ("server", what a node logs before it knows its rank).
bool has_node_prefix(std::string_view line, std::string_view node_name);

// The line as the launcher echoes it: unchanged if it has the node's prefix,
// else log_prefix(now_s, node_name) + line.
std::string echo_line(std::string_view line, std::string_view node_name, double now_s);

}  // namespace pstrain::launcher
