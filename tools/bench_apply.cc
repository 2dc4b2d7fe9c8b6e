// What a server's apply costs: the ShardStore (server/shard_store.h) of one
// chunk of SIZE bytes takes the pushes of W workers, in this process, with
// no transport: the finite checks, the rank-ordered sum (sync), the mean and
// the optimizer's out-of-place update, as a server runs them for each chunk.
// Beside it, memcpy of SIZE bytes measured in the same run.
//   ms/step    = time of one step (sync: the W pushes that make one update;
//                async: W pushes, W updates), median over rounds
//   GB/s in    = C * W * SIZE / step time: gradient bytes taken in per second
//                (C = --chunks, each SIZE, all pushed every step)
//   memcpys    = step time / time of one memcpy of SIZE: how many copies of
//                the chunk a step costs (sync, W = 2, plain SGD: the first
//                gradient copied into the sum, then one pass that adds the
//                second and updates: reads g0, g1, the sum and the weights,
//                writes the sum and the new weights)
//   speedup    = ms/step with 1 apply thread / ms/step with T threads (same
//                size and workers, same run; "-" without a 1-thread row)
// --threads 1,2,4,8: the server's apply threads (ps.apply_threads,
// server/parallel_apply.h), each update and sum pass split in parts of at
// least --split-bytes (ps.apply_split_bytes); memcpy stays one thread.
// Pushes arrive in rank order unless --order reverse (the highest rank first:
// every push but rank 0's waits early, so no add is fused into the update).
// --hold none,reply: "reply" keeps a pull's snapshot of the weights across
// each step, as a pull reply still being sent does, so every update goes out
// of place into a spare; "none" lets the store update in place (server/
// shard_store.h): the two paths side by side in one run.
// Each figure is the median over --trials alternating memcpy/apply trials.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/base/json_line.h"
#include "server/parallel_apply.h"
#include "server/shard_store.h"
#include "tools/bench/processes.h"

using namespace pstrain;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::vector<double> sizes_mib{1, 4, 16, 64};
  std::vector<int> workers{1, 2, 4};
  std::vector<int> threads{1};
  std::vector<std::string> holds{"none"};
  std::int64_t split_bytes = std::int64_t{1} << 17;
  std::string mode = "sync", optimizer = "sgd", order = "rank", json;
  int trials = 3, rounds = 0, chunks = 1;
};

struct Row {
  int threads = 1, workers = 0;
  std::string hold = "none";
  double size_mib = 0, step_ms = 0, memcpy_ms = 0;
  double speedup = 0;  // vs the 1-thread row of the same size and workers; 0: none
  int wrong = 0;
};

// Median seconds per step; `wrong` counts weights off the expected value
// (every gradient is 1/1024, lr 1: exact in float32 for these step counts).
double apply_s(const Args& a, int threads, int workers, std::size_t num_bytes, int rounds, bool hold, int& wrong) {
  const auto n = static_cast<std::int64_t>(num_bytes / sizeof(float));
  ParamLayout layout;
  layout.add("chunks", {n * a.chunks});
  const ShardMap map(layout, 1, n * static_cast<std::int64_t>(sizeof(float)));
  StoreOptions so;
  so.consistency = ConsistencyOptions{a.mode == "async" ? Mode::kAsync : Mode::kSync, 0};
  so.optimizer.name = a.optimizer == "adam" ? "adam" : "sgd";
  so.optimizer.momentum = a.optimizer == "momentum" || a.optimizer == "nesterov" ? 0.9 : 0.0;
  so.optimizer.nesterov = a.optimizer == "nesterov";
  so.optimizer.weight_decay = a.optimizer == "nesterov" ? 5e-4 : 0.0;  // nesterov: configs/default.toml's SGD
  ApplyPool pool(threads, static_cast<std::size_t>(a.split_bytes) / sizeof(float));
  so.ranges = &pool;
  ShardStore store(map, 0, workers, so);
  // A gradient buffer per chunk, as pushes land in different memory.
  std::vector<std::vector<float>> grads;
  for (int k = 0; k < a.chunks; ++k) {
    store.init(k, std::vector<float>(static_cast<std::size_t>(n), 1.0f));
    grads.emplace_back(static_cast<std::size_t>(n), 1.0f / 1024.0f);
  }
  std::vector<double> times;
  const int steps = rounds + 2;
  std::vector<WeightsSnapshot> held(static_cast<std::size_t>(a.chunks));
  for (int step = 0; step < steps; ++step) {
    // As replies being sent hold them.
    for (int k = 0; k < a.chunks && hold; ++k) held[static_cast<std::size_t>(k)] = store.snapshot(-1, k, step);
    const auto t0 = Clock::now();
    for (int k = 0; k < a.chunks; ++k) {
      for (int i = 0; i < workers; ++i) {
        const int w = a.order == "reverse" ? workers - 1 - i : i;
        (void)store.push(w, k, step, grads[static_cast<std::size_t>(k)], 1.0);
      }
    }
    if (step >= 2) times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  if (a.optimizer == "sgd") {
    const int updates = a.mode == "async" ? steps * workers : steps;
    const float expect = 1.0f - static_cast<float>(updates) / 1024.0f;
    for (int k = 0; k < a.chunks; ++k) {
      for (float x : store.snapshot(-1, k, steps).values()) wrong += x != expect ? 1 : 0;
    }
  }
  return bench::median(times);
}

// The 1-thread row of the same size and workers gives each row its speedup.
void add_speedups(std::vector<Row>& rows) {
  for (Row& r : rows) {
    for (const Row& base : rows) {
      if (base.threads == 1 && base.hold == r.hold && base.workers == r.workers && base.size_mib == r.size_mib) {
        r.speedup = base.step_ms / r.step_ms;
      }
    }
  }
}

void print_table(const Args& a, const std::vector<Row>& rows) {
  std::printf("# server apply, %s, %s, pushes in %s order, %d chunk(s) of SIZE, parts >= %lld bytes; GB = 1e9 bytes\n",
              a.mode.c_str(), a.optimizer.c_str(), a.order.c_str(), a.chunks, static_cast<long long>(a.split_bytes));
  std::printf("%8s %6s %8s %10s %12s %12s %14s %10s %9s %7s\n", "threads", "hold", "workers", "size(MiB)", "ms/step",
              "GB/s in", "memcpy(GB/s)", "memcpys", "speedup", "#wrong");
  for (const Row& r : rows) {
    const double bytes = r.size_mib * 1048576.0;
    char speedup[32] = "-";
    if (r.speedup > 0) std::snprintf(speedup, sizeof(speedup), "%.2fx", r.speedup);
    std::printf("%8d %6s %8d %10.1f %12.3f %12.2f %14.2f %10.2f %9s %7d\n", r.threads, r.hold.c_str(), r.workers,
                r.size_mib, r.step_ms, a.chunks * r.workers * bytes / (r.step_ms * 1e6), bytes / (r.memcpy_ms * 1e6),
                r.step_ms / (a.chunks * r.memcpy_ms), speedup,
                r.wrong);
  }
}

void write_json(const Args& a, const std::vector<Row>& rows) {
  std::ofstream out(a.json);
  out << "[\n";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    const double bytes = r.size_mib * 1048576.0;
    JsonLine line;
    line.add("bench", "apply").add("mode", a.mode).add("optimizer", a.optimizer).add("order", a.order)
        .add("chunks", a.chunks)
        .add("threads", r.threads).add("hold", r.hold).add("split_bytes", a.split_bytes).add("workers", r.workers)
        .add("size_mib", r.size_mib).add("step_ms", r.step_ms)
        .add("gbps_in", a.chunks * r.workers * bytes / (r.step_ms * 1e6))
        .add("memcpy_gbps", bytes / (r.memcpy_ms * 1e6)).add("memcpys_per_step", r.step_ms / (a.chunks * r.memcpy_ms));
    if (r.speedup > 0) line.add("speedup", r.speedup);
    out << "  " << line.add("wrong", r.wrong).str() << (i + 1 < rows.size() ? ",\n" : "\n");
  }
  out << "]\n";
}

std::vector<Row> measure(const Args& a) {
  std::vector<Row> rows;
  for (const int workers : a.workers) {
    for (const double mib : a.sizes_mib) {
      const auto num_bytes = static_cast<std::size_t>(mib * 1048576.0) / 4 * 4;
      const int rounds = bench::rounds_for(mib, a.rounds);
      for (const int threads : a.threads) {
        // The holds alternate within each trial: side by side on a loaded machine.
        std::vector<Row> group;
        std::vector<std::vector<double>> copies(a.holds.size()), steps(a.holds.size());
        for (const std::string& hold : a.holds) group.push_back(Row{threads, workers, hold, mib});
        for (int t = 0; t < a.trials; ++t) {
          for (std::size_t h = 0; h < a.holds.size(); ++h) {
            copies[h].push_back(bench::memcpy_seconds(num_bytes, rounds));
            steps[h].push_back(apply_s(a, threads, workers, num_bytes, rounds, a.holds[h] == "reply", group[h].wrong));
          }
        }
        for (std::size_t h = 0; h < a.holds.size(); ++h) {
          group[h].step_ms = 1e3 * bench::median(steps[h]);
          group[h].memcpy_ms = 1e3 * bench::median(copies[h]);
          rows.push_back(group[h]);
        }
      }
    }
  }
  add_speedups(rows);
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"a server's apply of W workers' pushes to one chunk, beside memcpy"};
  Args a;
  app.add_option("--sizes", a.sizes_mib, "chunk sizes in MiB")->delimiter(',');
  app.add_option("--workers", a.workers, "worker counts")->delimiter(',')->check(CLI::Range(1, 64));
  app.add_option("--threads", a.threads, "apply thread counts, e.g. 1,2,4,8 (ps.apply_threads)")
      ->delimiter(',')->check(CLI::Range(1, 1024));
  app.add_option("--split-bytes", a.split_bytes, "smallest part a thread takes (ps.apply_split_bytes)")
      ->check(CLI::Range(std::int64_t{4}, std::int64_t{1} << 40));
  app.add_option("--mode", a.mode, "sync or async")->check(CLI::IsMember({"sync", "async"}));
  app.add_option("--optimizer", a.optimizer,
                 "sgd, momentum, nesterov (with weight decay: the default config's) or adam")
      ->check(CLI::IsMember({"sgd", "momentum", "nesterov", "adam"}));
  app.add_option("--hold", a.holds, "none (updates in place), reply (a pull's snapshot held: out of place)")
      ->delimiter(',')->check(CLI::IsMember({"none", "reply"}));
  app.add_option("--order", a.order, "rank (pushes in rank order) or reverse (highest rank first)")
      ->check(CLI::IsMember({"rank", "reverse"}));
  app.add_option("--chunks", a.chunks,
                 "chunks of SIZE each on the server, each pushed every step (a step's time covers them all)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--trials", a.trials, "alternating memcpy/apply trials (medians reported)")->check(CLI::Range(1, 50));
  app.add_option("--rounds", a.rounds, "timed steps per trial (default: by size)");
  app.add_option("--json", a.json, "also write results to this JSON file");
  CLI11_PARSE(app, argc, argv);
  const std::vector<Row> rows = measure(a);
  print_table(a, rows);
  if (!a.json.empty()) write_json(a, rows);
  int wrong = 0;
  for (const Row& r : rows) wrong += r.wrong;
  return wrong == 0 ? 0 : 1;
}
