#include "tools/launcher/supervisor.h"

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include "common/base/errors.h"
#include "tools/launcher/line_prefix.h"
#include "tools/launcher/line_splitter.h"

namespace pstrain::launcher {
namespace {

constexpr std::size_t kReadBytes = 64 * 1024;
constexpr int kReadsPerWake = 16;  // then let the other streams have a turn
constexpr std::chrono::milliseconds kKillWait{5000};  // for the kernel to end SIGKILLed processes

}  // namespace

struct Supervisor::Stream {
  int fd = -1;
  std::unique_ptr<LineSplitter> splitter;

  void close_fd() {
    if (fd < 0) return;
    splitter->finish();
    close(fd);
    fd = -1;
  }
};

struct Supervisor::Node {
  NodeState state;
  Stream out;
  Stream err;
  std::FILE* log = nullptr;  // closed when the node exits
  std::filesystem::path log_path;
  int stdin_fd = -1;  // NodeSpec::stdin_pipe: its write end

  void close_stdin() {
    if (stdin_fd >= 0) close(stdin_fd);
    stdin_fd = -1;
  }

  Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  ~Node() {
    close_stdin();
    if (log != nullptr) std::fclose(log);
  }
};

Supervisor::Supervisor(SupervisorOptions options, SignalWatch& signals)
    : options_(std::move(options)), signals_(signals) {}

Supervisor::~Supervisor() {
  for (auto& node : nodes_) {
    if (!node->state.status) {
      signal_group(node->state.pid, SIGKILL);
      int status = 0;
      while (waitpid(node->state.pid, &status, 0) < 0 && errno == EINTR) {
      }
    }
    node->out.close_fd();  // hands on the last partial lines
    node->err.close_fd();
  }
  flush();
}

std::size_t Supervisor::start(const NodeSpec& spec) {
  auto node = std::make_unique<Node>();
  node->state.spec = spec;
  const std::filesystem::path log_path = options_.log_dir / (spec.log_stem + ".log");
  node->log = std::fopen(log_path.c_str(), options_.append_logs || spec.append_log ? "ae" : "we");
  if (node->log == nullptr) throw Error("cannot write " + log_path.string() + ": " + std::strerror(errno));
  std::setvbuf(node->log, nullptr, _IOLBF, 0);  // each line reaches the file (or fails) as it comes
  node->log_path = log_path;
  Node* raw = node.get();
  node->out.splitter = std::make_unique<LineSplitter>([this, raw](std::string_view l) { on_line(*raw, false, l); });
  node->err.splitter = std::make_unique<LineSplitter>([this, raw](std::string_view l) { on_line(*raw, true, l); });
  nodes_.reserve(nodes_.size() + 1);  // so that adding it after the fork cannot fail
  const Child child = spawn_child(spec.argv, signals_, spec.stdin_pipe);
  node->state.pid = child.pid;
  node->state.started_s = options_.clock.now_s();
  node->stdin_fd = child.stdin_fd;
  node->out.fd = child.stdout_fd;
  node->err.fd = child.stderr_fd;
  nodes_.push_back(std::move(node));  // from here on the destructor reaps it
  return nodes_.size() - 1;
}

void Supervisor::on_line(Node& node, bool is_stderr, std::string_view line) {
  if (options_.on_line) options_.on_line(node.state.spec.name, line);
  if (options_.echo) {
    if (options_.before_echo) options_.before_echo();
    std::string text = echo_line(line, node.state.spec.name, options_.clock.now_s());
    text += '\n';
    std::fwrite(text.data(), 1, text.size(), options_.echo_to);
  }
  if (node.log != nullptr) {
    const bool ok = std::fwrite(line.data(), 1, line.size(), node.log) == line.size() &&
                    std::fputc('\n', node.log) != EOF && std::fflush(node.log) == 0;
    if (!ok) {
      const int err = errno;
      std::fclose(node.log);
      node.log = nullptr;
      if (write_failure_.empty()) {
        write_failure_ = "cannot write " + node.log_path.string() + ": " + std::strerror(err);
        for (std::size_t i = 0; i < nodes_.size(); ++i) {
          if (nodes_[i].get() == &node) write_failure_node_ = i;
        }
      }
    }
  }
  if (is_stderr) {
    node.state.stderr_tail.emplace_back(line);
    if (node.state.stderr_tail.size() > options_.tail_lines) node.state.stderr_tail.pop_front();
  }
}

bool Supervisor::read_stream(Stream& stream) {
  std::array<char, kReadBytes> buf;
  for (int i = 0; i < kReadsPerWake && stream.fd >= 0; ++i) {
    const ssize_t n = read(stream.fd, buf.data(), buf.size());
    if (n > 0) {
      stream.splitter->feed(std::string_view(buf.data(), static_cast<std::size_t>(n)));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return false;
    } else {
      stream.close_fd();  // end of file, or a broken pipe
    }
  }
  return stream.fd >= 0;
}

void Supervisor::mark_exited(Node& node, int wait_status) {
  // The process is gone, so all it wrote is in the pipes: read to the end.
  // A pipe that is empty but not at its end is held by a descendant: let go.
  for (Stream* s : {&node.out, &node.err}) {
    while (read_stream(*s)) {
    }
    s->close_fd();
  }
  node.close_stdin();
  node.state.status = decode_wait_status(wait_status);
  node.state.exit_order = exits_++;
  if (node.log != nullptr) std::fclose(node.log);
  node.log = nullptr;
}

void Supervisor::reap() {
  for (auto& node : nodes_) {
    if (node->state.status) continue;
    int status = 0;
    const pid_t r = waitpid(node->state.pid, &status, WNOHANG);
    if (r == node->state.pid) mark_exited(*node, status);
  }
}

void Supervisor::wait_once(std::chrono::milliseconds timeout) {
  std::vector<pollfd> fds{{signals_.fd(), POLLIN, 0}};
  std::vector<Stream*> owners;
  for (auto& node : nodes_) {
    for (Stream* s : {&node->out, &node->err}) {
      if (s->fd < 0) continue;
      fds.push_back({s->fd, POLLIN, 0});
      owners.push_back(s);
    }
  }
  const int timeout_ms = static_cast<int>(std::max<std::chrono::milliseconds::rep>(0, timeout.count()));
  if (poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) {
    throw Error(std::string("poll failed: ") + std::strerror(errno));
  }
  for (std::size_t i = 1; i < fds.size(); ++i) {
    if (fds[i].revents != 0) read_stream(*owners[i - 1]);
  }
  while (const auto sig = signals_.next()) {
    if (*sig != SIGCHLD) pending_signal_ = *sig;
  }
  reap();  // every time: SIGCHLDs coalesce
  flush();
}

std::optional<std::size_t> Supervisor::first_failure() const {
  std::optional<std::size_t> first;
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    const NodeState& s = nodes_[i]->state;
    if (!s.status || s.status->ok() || s.stopped_by_us || s.tolerated) continue;
    if (!first || s.exit_order < nodes_[*first]->state.exit_order) first = i;
  }
  return first;
}

void Supervisor::tolerate(std::size_t index) { nodes_.at(index)->state.tolerated = true; }

bool Supervisor::kill_node(std::size_t index) {
  const NodeState& state = nodes_.at(index)->state;
  if (state.status) return false;
  return signal_group(state.pid, SIGKILL);
}

Supervisor::Outcome Supervisor::run_until(const std::function<bool()>& condition,
                                          std::optional<Clock::time_point> deadline,
                                          std::chrono::milliseconds tick, bool stop_on_failure) {
  for (;;) {
    if (pending_signal_) {
      const int sig = *pending_signal_;
      pending_signal_.reset();
      return Outcome{Event::kSignal, sig, 0};
    }
    const auto failed = first_failure();
    if (failed && stop_on_failure) return Outcome{Event::kFailure, 0, *failed};
    if (!write_failure_.empty() && !write_failure_reported_) {
      write_failure_reported_ = true;  // once: stopping the job must not end on it again
      return Outcome{Event::kWriteFailure, 0, write_failure_node_};
    }
    if (condition()) return Outcome{Event::kCondition, 0, 0};
    auto timeout = tick;
    if (deadline) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - Clock::now());
      if (left.count() <= 0) return Outcome{Event::kDeadline, 0, 0};
      timeout = std::min(timeout, left + std::chrono::milliseconds(1));
    }
    wait_once(timeout);
  }
}

void Supervisor::signal_running(int signal) {
  for (auto& node : nodes_) {
    if (node->state.status) continue;
    node->state.stopped_by_us = true;
    node->close_stdin();  // a node on another host stops when its input ends (remote.h)
    signal_group(node->state.pid, signal);
  }
}

void Supervisor::wait_all_exited(std::chrono::milliseconds limit, bool escalate_on_signal) {
  const auto deadline = Clock::now() + limit;
  while (!all_exited()) {
    if (escalate_on_signal && pending_signal_) break;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) break;
    wait_once(std::min(left, std::chrono::milliseconds(200)));
  }
  pending_signal_.reset();
}

void Supervisor::stop_all(std::chrono::milliseconds grace) {
  signal_running(SIGTERM);
  wait_all_exited(grace, true);
  if (all_exited()) return;
  signal_running(SIGKILL);
  wait_all_exited(std::max(grace, kKillWait), false);
}

bool Supervisor::all_exited() const {
  return std::all_of(nodes_.begin(), nodes_.end(), [](const auto& n) { return n->state.status.has_value(); });
}

bool Supervisor::exited(std::size_t node) const { return nodes_.at(node)->state.status.has_value(); }

std::vector<NodeState> Supervisor::states() const {
  std::vector<NodeState> out;
  for (const auto& node : nodes_) out.push_back(node->state);
  return out;
}

std::string Supervisor::pids_text() const {
  std::string out;
  for (const auto& node : nodes_) out += node->state.spec.log_stem + " " + std::to_string(node->state.pid) + "\n";
  return out;
}

void Supervisor::flush() {
  std::fflush(options_.echo_to);
  for (const auto& node : nodes_) {
    if (node->log != nullptr) std::fflush(node->log);
  }
}

}  // namespace pstrain::launcher
