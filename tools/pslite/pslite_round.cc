// The push-then-pull round of bench_pushpull, run on ps-lite (dmlc/ps-lite)
// instead of pstrain, so that the two can be compared in one script
// (tools/bench_pslite.sh). Not part of the project's build: it needs a
// ps-lite source tree and protobuf, and the script builds it out of the repo.
//
// Every node is its own forked process on loopback TCP, as ps-lite runs in
// a real job: one scheduler, S servers, W workers, configured through the
// DMLC_* environment variables ps-lite reads.
//
// One round, on every worker: push a float tensor of SIZE bytes of
// gradients (all 1), split one key per server (ps-lite's key ranges: key s
// lies in server s's range, its value is the s-th of S near-equal slices),
// then pull the same keys right away, without waiting for the push to be
// acknowledged (ZPush + ZPull, zero-copy on the worker's side; ps-lite copies
// the pulled slices into the caller's buffer).
//
// The server is sync SGD with lr 1 over the mean gradient, the update
// bench_pushpull's pstrain servers do: a round's pushes but the last are
// summed into an accumulator (times 1/W), the last push applies itself and
// the accumulator to the weights in one pass (with one worker: w -= g, one
// pass, no accumulator), and a worker's pull is answered once all W pushes
// of its round are in (pulls that arrive earlier wait in the server; a late
// pull still sees its round's weights, as the next round's early pushes
// only reach the accumulator). Pull replies share the weight buffer
// (zero-copy); a push that finds the buffer still held by a reply in flight
// copies it first (copy-on-write), so no reply is torn.
//
// Correctness is checked after the timed rounds: every pulled element must
// equal -(rounds done), as weights start at 0 and move by -1 per round.
//
//   GB/s per worker = 2 * SIZE / round time (GB = 1e9 bytes), worker 0's
//   median round after warm-up, as bench_pushpull reports.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "ps/ps.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::vector<double> sizes_mib{1, 4, 16, 64};
  int servers = 1, workers = 1, rounds = 0, warmup = 2;
  std::string json;
};

[[noreturn]] void usage(const char* argv0, const std::string& why) {
  std::fprintf(stderr,
               "%s: %s\n"
               "usage: %s [--servers S] [--workers W] [--sizes 1,4,16,64] [--rounds N] [--warmup N] [--json FILE]\n"
               "  --rounds 0 (default): by size, as bench_pushpull (400 MiB in all, 8..200 rounds)\n",
               argv0, why.c_str(), argv0);
  std::exit(2);
}

int parse_int(const char* argv0, const std::string& flag, const std::string& text, int lo, int hi) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < lo || v > hi) {
    usage(argv0, flag + " wants an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" + text + "'");
  }
  return static_cast<int>(v);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") usage(argv[0], "help");
    if (i + 1 >= argc) usage(argv[0], "missing value after " + flag);
    const std::string value = argv[++i];
    if (flag == "--servers") {
      a.servers = parse_int(argv[0], flag, value, 1, 64);
    } else if (flag == "--workers") {
      a.workers = parse_int(argv[0], flag, value, 1, 64);
    } else if (flag == "--rounds") {
      a.rounds = parse_int(argv[0], flag, value, 0, 1000000);
    } else if (flag == "--warmup") {
      a.warmup = parse_int(argv[0], flag, value, 0, 1000);
    } else if (flag == "--json") {
      a.json = value;
    } else if (flag == "--sizes") {
      a.sizes_mib.clear();
      std::stringstream in(value);
      std::string item;
      while (std::getline(in, item, ',')) {
        char* end = nullptr;
        const double mib = std::strtod(item.c_str(), &end);
        if (item.empty() || *end != '\0' || !(mib > 0) || mib > 4096) usage(argv[0], "bad size '" + item + "' in --sizes");
        a.sizes_mib.push_back(mib);
      }
      if (a.sizes_mib.empty()) usage(argv[0], "--sizes is empty");
    } else {
      usage(argv[0], "unknown flag " + flag);
    }
  }
  return a;
}

int rounds_for(double mib, int requested) {  // as tools/bench/processes.cc
  if (requested > 0) return requested;
  return std::clamp(static_cast<int>(400.0 / mib), 8, 200);
}

std::size_t floats_of(double mib) { return static_cast<std::size_t>(mib * 1048576.0) / 4; }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n == 0 ? 0.0 : (n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

// A free loopback port for ps-lite's scheduler (there is a short window in
// which another process could take it; ps-lite then fails to bind, loudly).
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  int port = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

// ---- server ----

struct KeyState {
  ps::SArray<float> weights;
  std::vector<float> acc;               // the round's pushes but its last, times 1/W
  std::set<int> pushed;                 // senders whose push of the open round is in
  long rounds_done = 0;                 // completed rounds (all W pushes applied)
  std::map<int, long> pulls;            // pulls seen per sender: a sender's p-th pull wants round p done
  struct Waiting {
    long round;
    ps::KVMeta meta;
    ps::KVPairs<float> req;
  };
  std::vector<Waiting> waiting;         // pulls whose round is not done yet
};

class SyncSgdServer {
 public:
  explicit SyncSgdServer(int workers) : workers_(workers), server_(0) {
    server_.set_request_handle([this](const ps::KVMeta& meta, const ps::KVPairs<float>& req, ps::KVServer<float>* s) {
      handle(meta, req, s);
    });
  }

 private:
  void reply_pull(const ps::KVMeta& meta, const ps::KVPairs<float>& req, ps::KVServer<float>* s) {
    ps::KVPairs<float> res;
    res.keys = req.keys;
    res.lens.resize(req.keys.size());
    // One key per request in this benchmark; more are served by copying.
    if (req.keys.size() == 1) {
      const KeyState& k = keys_.at(req.keys.data()[0]);
      res.vals = k.weights;  // zero-copy: the reply holds a reference
      res.lens.data()[0] = static_cast<int>(k.weights.size());
    } else {
      std::size_t total = 0;
      for (std::size_t i = 0; i < req.keys.size(); ++i) total += keys_.at(req.keys.data()[i]).weights.size();
      res.vals.resize(total);
      std::size_t at = 0;
      for (std::size_t i = 0; i < req.keys.size(); ++i) {
        const ps::SArray<float>& w = keys_.at(req.keys.data()[i]).weights;
        std::memcpy(res.vals.data() + at, w.data(), w.size() * sizeof(float));
        res.lens.data()[i] = static_cast<int>(w.size());
        at += w.size();
      }
    }
    s->Response(meta, res);
  }

  void handle(const ps::KVMeta& meta, const ps::KVPairs<float>& req, ps::KVServer<float>* s) {
    if (meta.push) {
      const float scale = 1.0f / static_cast<float>(workers_);
      std::size_t at = 0;
      for (std::size_t i = 0; i < req.keys.size(); ++i) {
        const std::size_t n = req.lens.empty() ? req.vals.size() / req.keys.size() : static_cast<std::size_t>(req.lens.data()[i]);
        KeyState& k = keys_[req.keys.data()[i]];
        if (k.weights.size() != n) k.weights = ps::SArray<float>(n, 0.0f);
        const float* g = req.vals.data() + at;
        at += n;
        k.pushed.insert(meta.sender);
        const auto pushed = static_cast<int>(k.pushed.size());
        if (pushed < workers_) {  // not the last push of the round: into the accumulator
          if (k.acc.size() != n) k.acc.resize(n);
          float* acc = k.acc.data();
          if (pushed == 1) {
            for (std::size_t j = 0; j < n; ++j) acc[j] = scale * g[j];
          } else {
            for (std::size_t j = 0; j < n; ++j) acc[j] += scale * g[j];
          }
          continue;
        }
        // The last push of the round: one pass applies it and the accumulator.
        if (k.weights.ptr().use_count() > 1) {  // a pull reply still holds the buffer: copy on write
          ps::SArray<float> fresh;
          fresh.CopyFrom(k.weights);
          k.weights = fresh;
        }
        float* w = k.weights.data();
        if (workers_ == 1) {
          for (std::size_t j = 0; j < n; ++j) w[j] -= g[j];
        } else {
          const float* acc = k.acc.data();
          for (std::size_t j = 0; j < n; ++j) w[j] -= acc[j] + scale * g[j];
        }
      }
      s->Response(meta);
      for (std::size_t i = 0; i < req.keys.size(); ++i) {
        KeyState& k = keys_[req.keys.data()[i]];
        if (static_cast<int>(k.pushed.size()) < workers_) continue;
        k.pushed.clear();
        ++k.rounds_done;
        std::vector<KeyState::Waiting> still, ready;
        for (KeyState::Waiting& w : k.waiting) (w.round <= k.rounds_done ? ready : still).push_back(std::move(w));
        k.waiting.swap(still);
        for (const KeyState::Waiting& w : ready) reply_pull(w.meta, w.req, s);
      }
      return;
    }
    // A pull. ps-lite's customer queue orders requests by priority only, so
    // a worker's pull can be handled before its push of the same round,
    // although it was sent after it: a sender's p-th pull waits until round p
    // is done. (Requests here carry one key; the first key decides.)
    KeyState& k = keys_[req.keys.data()[0]];
    const long round = ++k.pulls[meta.sender];
    if (round > k.rounds_done) {
      k.waiting.push_back(KeyState::Waiting{round, meta, req});
      return;
    }
    reply_pull(meta, req, s);
  }

  int workers_;
  ps::KVServer<float> server_;
  std::map<ps::Key, KeyState> keys_;
};

// ---- worker ----

struct SizeResult {
  double size_mib = 0, round_ms = 0, min_ms = 0, max_ms = 0, gbps_per_worker = 0;
  int rounds = 0;
  long wrong = 0;
};

SizeResult run_size(ps::KVWorker<float>& kv, double mib, std::size_t size_index, const Args& a) {
  const std::size_t n = floats_of(mib);
  const auto servers = static_cast<std::size_t>(ps::NumServers());
  const std::vector<ps::Range>& ranges = ps::Postoffice::Get()->GetServerKeyRanges();
  ps::SArray<ps::Key> keys(servers);
  ps::SArray<int> lens(servers);
  for (std::size_t s = 0; s < servers; ++s) {
    keys.data()[s] = ranges[s].begin() + size_index;  // one key per server, a new one per size
    lens.data()[s] = static_cast<int>(n / servers + (s < n % servers ? 1 : 0));
  }
  ps::SArray<float> grad(n, 1.0f), pulled(n, 0.0f);
  const int rounds = rounds_for(mib, a.rounds);
  std::vector<double> times;
  for (int r = 0; r < a.warmup + rounds; ++r) {
    const auto t0 = Clock::now();
    const int push = kv.ZPush(keys, grad, lens);
    const int pull = kv.ZPull(keys, &pulled);
    kv.Wait(push);
    kv.Wait(pull);
    const auto t1 = Clock::now();
    if (r >= a.warmup) times.push_back(std::chrono::duration<double>(t1 - t0).count());
  }
  SizeResult out;
  out.size_mib = mib;
  out.rounds = rounds;
  const float expect = -static_cast<float>(a.warmup + rounds);
  for (std::size_t i = 0; i < n; ++i) out.wrong += pulled.data()[i] != expect ? 1 : 0;
  const double med = median(times);
  out.round_ms = 1e3 * med;
  out.min_ms = 1e3 * *std::min_element(times.begin(), times.end());
  out.max_ms = 1e3 * *std::max_element(times.begin(), times.end());
  out.gbps_per_worker = 2.0 * static_cast<double>(n) * 4.0 / med / 1e9;
  return out;
}

void report(const Args& a, const std::vector<SizeResult>& results) {
  std::printf("# ps-lite push+pull, %d worker(s) x %d server(s), tcp loopback, sync, plain SGD (w -= g/W); GB = 1e9 bytes\n",
              a.workers, a.servers);
  std::printf("%10s %12s %16s %14s %8s %7s\n", "size(MiB)", "round(ms)", "GB/s/worker", "total(GB/s)", "rounds", "#wrong");
  for (const SizeResult& r : results) {
    std::printf("%10.1f %12.3f %16.3f %14.3f %8d %7ld\n", r.size_mib, r.round_ms, r.gbps_per_worker,
                r.gbps_per_worker * a.workers, r.rounds, r.wrong);
  }
  std::fflush(stdout);
  if (a.json.empty()) return;
  std::ofstream out(a.json);
  out << "[\n";
  for (std::size_t i = 0; i < results.size(); ++i) {
    const SizeResult& r = results[i];
    char line[512];
    std::snprintf(line, sizeof line,
                  "  {\"bench\":\"pslite_round\",\"workers\":%d,\"servers\":%d,\"transport\":\"tcp\",\"size_mib\":%g,"
                  "\"round_ms\":%.6f,\"round_ms_min\":%.6f,\"round_ms_max\":%.6f,\"gbps_per_worker\":%.6f,"
                  "\"total_gbps\":%.6f,\"rounds\":%d,\"wrong\":%ld}%s\n",
                  a.workers, a.servers, r.size_mib, r.round_ms, r.min_ms, r.max_ms, r.gbps_per_worker,
                  r.gbps_per_worker * a.workers, r.rounds, r.wrong, i + 1 < results.size() ? "," : "");
    out << line;
  }
  out << "]\n";
  if (!out) std::fprintf(stderr, "pslite_round: cannot write %s\n", a.json.c_str());
}

// One node of the job; `role` is "scheduler", "server" or "worker".
int run_node(const std::string& role, const Args& a) {
  setenv("DMLC_ROLE", role.c_str(), 1);
  ps::Start(0);
  long wrong = 0;
  if (role == "server") {
    SyncSgdServer server(a.workers);
    ps::Finalize(0, true);  // the barrier returns once every worker is done
    return 0;
  }
  if (role == "worker") {
    std::vector<SizeResult> results;
    {
      ps::KVWorker<float> kv(0, 0);
      for (std::size_t i = 0; i < a.sizes_mib.size(); ++i) {
        results.push_back(run_size(kv, a.sizes_mib[i], i, a));
        wrong += results.back().wrong;
      }
    }
    if (ps::MyRank() == 0) report(a, results);
  }
  ps::Finalize(0, true);
  return wrong == 0 ? 0 : 3;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  const int port = free_port();
  if (port <= 0) {
    std::fprintf(stderr, "pslite_round: no free loopback port\n");
    return 1;
  }
  setenv("DMLC_PS_ROOT_URI", "127.0.0.1", 1);
  setenv("DMLC_PS_ROOT_PORT", std::to_string(port).c_str(), 1);
  setenv("DMLC_NUM_SERVER", std::to_string(a.servers).c_str(), 1);
  setenv("DMLC_NUM_WORKER", std::to_string(a.workers).c_str(), 1);
  setenv("DMLC_NODE_HOST", "127.0.0.1", 1);
  setenv("DMLC_INTERFACE", "lo", 1);
  std::vector<std::string> roles{"scheduler"};
  for (int s = 0; s < a.servers; ++s) roles.push_back("server");
  for (int w = 0; w < a.workers; ++w) roles.push_back("worker");
  std::vector<pid_t> pids;
  for (const std::string& role : roles) {
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("pslite_round: fork");
      for (pid_t p : pids) kill(p, SIGTERM);
      return 1;
    }
    if (pid == 0) {
      int rc = 1;
      try {
        rc = run_node(role, a);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "pslite_round: %s: %s\n", role.c_str(), e.what());
      }
      std::fflush(nullptr);
      _exit(rc);
    }
    pids.push_back(pid);
  }
  int failed = 0;
  for (pid_t p : pids) {
    int status = 0;
    if (waitpid(p, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  if (failed > 0) {
    std::fprintf(stderr, "pslite_round: %d of %zu processes failed\n", failed, pids.size());
    return 1;
  }
  return 0;
}
