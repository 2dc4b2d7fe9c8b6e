// Nodes on other hosts: `launch` starts a server or worker whose host in
// cluster.server_hosts / cluster.worker_hosts is not this machine over ssh
// (as horovodrun -H and MXNet's launch.py do). The remote side needs the same
// paths as this one (the build, the run directory, the current directory):
// a file system every host shares, as the run directory needs anyway.
//
// The remote command runs the program in the background and watches the
// ssh session's standard input, which the launcher holds open (a pipe,
// NodeSpec::stdin_pipe): when the launcher stops the node, dies, or the
// connection drops, the input ends and the program gets SIGTERM (and
// SIGCONT, so that a stopped one takes it; SIGKILL 10 s later if it is still
// there: hung), so no process outlives its job on another host. The program's exit code comes
// back as ssh's; ssh's own failures (no route, refused key) are code 255
// with ssh's message on stderr.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace pstrain::launcher {

// `text` as one word for a POSIX shell: single-quoted, inner quotes escaped.
std::string shell_quote(const std::string& text);

// The shell command the remote host runs: change to `cwd`, then run `argv`
// with `env` set, stopped when standard input ends.
std::string remote_command(const std::string& cwd, const std::map<std::string, std::string>& env,
                           const std::vector<std::string>& argv);

// The local argv: the words of `ssh_command` (split on spaces; "ssh -o
// BatchMode=yes" by default), the host, then the remote command.
std::vector<std::string> ssh_argv(const std::string& ssh_command, const std::string& host,
                                  const std::string& command);

// Whether `host` names this machine: localhost, a loopback address, its
// host name, or an address of one of its network interfaces.
bool is_this_machine(const std::string& host);

}  // namespace pstrain::launcher
