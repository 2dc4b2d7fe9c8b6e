// How the launcher reads a node's exit: its text ("exited with code 2
// (aborted: a peer failed)"), whether it failed on its own, and which of a
// failed job's nodes to blame.
#pragma once

#include <string>
#include <vector>

#include "tools/launcher/supervisor.h"

namespace pstrain::launcher {

// describe() plus what the node programs' exit codes mean.
std::string describe_exit(const ExitStatus& status);

// It failed, not stopped by the launcher, and not a failure the job goes on without.
bool failed_on_its_own(const NodeState& n);

// Exit code 2: the node stopped because the scheduler aborted the job.
bool aborted_by_peer(const ExitStatus& s);

// The failure to blame: the first to fail on its own, preferring a real
// error over an "aborted because a peer failed" exit; nullptr if none.
const NodeState* root_cause(const std::vector<NodeState>& nodes);

}  // namespace pstrain::launcher
