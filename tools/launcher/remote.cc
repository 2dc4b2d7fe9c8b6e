#include "tools/launcher/remote.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cstdlib>
#include <sstream>

#include "common/base/errors.h"

namespace pstrain::launcher {

std::string shell_quote(const std::string& text) {
  std::string out(1, '\'');
  for (const char c : text) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  out += '\'';
  return out;
}

std::string remote_command(const std::string& cwd, const std::map<std::string, std::string>& env,
                           const std::vector<std::string>& argv) {
  // fd 3 keeps the session's input: a background list's own input is /dev/null.
  std::string command = "cd ";
  command += shell_quote(cwd);
  command += " || exit 3; exec 3<&0; env";
  for (const auto& [name, value] : env) {
    command += ' ';
    command += shell_quote(name + "=" + value);
  }
  for (const std::string& a : argv) {
    command += ' ';
    command += shell_quote(a);
  }
  command +=
      " </dev/null & c=$!; { while read -r _ <&3; do :; done; kill -TERM $c; kill -CONT $c; sleep 10; kill -KILL $c; }"
      " >/dev/null 2>&1 & w=$!; "
      "wait $c; s=$?; kill $w 2>/dev/null; exit $s";
  return command;
}

std::vector<std::string> ssh_argv(const std::string& ssh_command, const std::string& host,
                                  const std::string& command) {
  std::vector<std::string> argv;
  std::istringstream words(ssh_command);
  for (std::string w; words >> w;) argv.push_back(w);
  if (argv.empty()) throw ConfigError("--ssh: empty command");
  if (argv[0].find('/') == std::string::npos) {  // the launcher executes paths: look it up in PATH
    const char* path = std::getenv("PATH");
    std::istringstream dirs(path != nullptr ? path : "/usr/bin:/bin");
    std::string found;
    for (std::string dir; found.empty() && std::getline(dirs, dir, ':');) {
      const std::string candidate = (dir.empty() ? "." : dir) + "/" + argv[0];
      if (access(candidate.c_str(), X_OK) == 0) found = candidate;
    }
    if (found.empty()) throw ConfigError("--ssh: '" + argv[0] + "' is not in PATH (nodes on other hosts need it)");
    argv[0] = found;
  }
  argv.push_back(host);
  argv.push_back(command);
  return argv;
}

bool is_this_machine(const std::string& host) {
  if (host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0) return true;
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) == 0 && host == name) return true;
  ifaddrs* addrs = nullptr;
  if (getifaddrs(&addrs) != 0) return false;
  bool found = false;
  for (const ifaddrs* a = addrs; a != nullptr && !found; a = a->ifa_next) {
    if (a->ifa_addr == nullptr) continue;
    char text[INET6_ADDRSTRLEN] = {};
    if (a->ifa_addr->sa_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr, text, sizeof text);
    } else if (a->ifa_addr->sa_family == AF_INET6) {
      inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(a->ifa_addr)->sin6_addr, text, sizeof text);
    } else {
      continue;
    }
    found = host == text;
  }
  freeifaddrs(addrs);
  return found;
}

}  // namespace pstrain::launcher
