#include "tools/launcher/node_exit.h"

#include "common/base/errors.h"

namespace pstrain::launcher {

std::string describe_exit(const ExitStatus& status) {
  std::string text = describe(status);
  if (!status.signaled && status.code == 2) text += " (aborted: a peer failed)";
  if (!status.signaled && status.code == 3) text += " (config error)";
  if (!status.signaled && status.code == kExitDiverged) text += " (training diverged)";
  if (!status.signaled && status.code == 127) text += " (could not be executed)";
  return text;
}

bool failed_on_its_own(const NodeState& n) {
  return n.status && !n.status->ok() && !n.stopped_by_us && !n.tolerated;
}

bool aborted_by_peer(const ExitStatus& s) { return !s.signaled && s.code == 2; }

const NodeState* root_cause(const std::vector<NodeState>& nodes) {
  const NodeState* first = nullptr;
  const NodeState* first_real = nullptr;
  for (const NodeState& n : nodes) {
    if (!failed_on_its_own(n)) continue;
    const bool real = !aborted_by_peer(*n.status);
    if (!first || n.exit_order < first->exit_order) first = &n;
    if (real && (!first_real || n.exit_order < first_real->exit_order)) first_real = &n;
  }
  return first_real ? first_real : first;
}

}  // namespace pstrain::launcher
