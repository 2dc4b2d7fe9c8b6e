// Fencing: a node the scheduler declared failed must really be gone. The
// scheduler appends each node it declares failed to RUN_DIR/failures.jsonl
// (pstrain-scheduler --failures-file; scheduler/scheduler.h, NodeFailure).
// A node declared failed for its silence (no heartbeat within
// cluster.heartbeat_timeout_ms) whose process is still running is stopped,
// hung, or cut off: the launcher kills it (SIGKILL to its process group; a
// node on another host: its ssh session, whose end stops the program there,
// tools/launcher/remote.h). Its exit then goes through the failure policy
// like a crash: "restart" starts its replacement at once, where it would
// otherwise wait for an exit that never comes, and the job's end does not
// wait for a process that will never exit. One exception: a worker over ssh
// under "continue" is left until the job has ended (then fenced if still
// there after --shutdown-timeout-s): across a cut link it learns by itself
// that it was dropped, and its reason reaches its log through the session.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tools/launcher/supervisor.h"

namespace pstrain::launcher {

// One line of failures.jsonl, as the launcher needs it.
struct DeclaredFailure {
  std::string node;          // "server 1", "worker 0": the launcher's node name
  std::int64_t pid = 0;      // the process the scheduler heard from (on its host)
  bool silent = false;       // no heartbeat in time (else it reported its own failure and exits by itself)
  double last_seen_s = 0;    // job clock: when the scheduler last heard from it
  std::string reason;        // the scheduler's words
};

// Parses one line; std::nullopt and `error` set when it is not a failure record.
std::optional<DeclaredFailure> parse_declared_failure(std::string_view line, std::string& error);

// The node to kill for `failure`, if any: a silent one, still running, named
// as the failure says, started no later than the scheduler last heard from
// it (a replacement started after the silence began is never the culprit,
// even with the same pid), and on this host the very process the scheduler
// heard from: the same pid (the launcher's own unreaped child, so the pid
// cannot be another process's). Over ssh the remote pid is not known here:
// the start time alone decides.
std::optional<std::size_t> node_to_fence(const std::vector<NodeState>& nodes, const DeclaredFailure& failure);

}  // namespace pstrain::launcher
