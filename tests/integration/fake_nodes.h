// Stand-in node programs (shell scripts) for testing the launcher's process
// handling on its own: each parses the flags the launcher passes and then
// runs a body given by the test, with $rank, $rd (the run dir) and $ef (the
// scheduler's endpoint file) set.
#pragma once

#include <string>

#include "tests/integration/launch_test_util.h"

namespace it {

inline const std::string kFakeEndpoint = "tcp://127.0.0.1:1";

// Writes `body` as DIR/<program> after the common flag parsing.
inline void write_fake_node(const fs::path& bin_dir, const std::string& program, const std::string& body) {
  write_file(bin_dir / program,
             "#!/bin/sh\n"
             "args=\"$*\"\n"
             "while [ $# -gt 0 ]; do\n"
             "  case \"$1\" in\n"
             "    --endpoint-file) ef=\"$2\"; shift ;;\n"
             "    --config) cfg=\"$2\"; shift ;;\n"
             "    --rank) rank=\"$2\"; shift ;;\n"
             "  esac\n"
             "  shift\n"
             "done\n"
             "rd=$(dirname \"$cfg\")\n" +
                 body + "\n",
             true);
}

// A scheduler that writes its endpoint and then runs `then`.
inline std::string scheduler_body(const std::string& then) {
  return "echo " + kFakeEndpoint + " > \"$ef.tmp\" && mv \"$ef.tmp\" \"$ef\"\n" + then;
}

// The three programs; servers and workers get the same body each.
inline void write_fake_bin(const fs::path& bin_dir, const std::string& scheduler, const std::string& server,
                           const std::string& worker) {
  write_fake_node(bin_dir, "pstrain-scheduler", scheduler);
  write_fake_node(bin_dir, "pstrain-server", server);
  write_fake_node(bin_dir, "pstrain-worker", worker);
}

}  // namespace it
