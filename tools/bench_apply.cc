// What a server's apply costs: the ShardStore (server/shard_store.h) of one
// chunk of SIZE bytes takes the pushes of W workers, in this process, with
// no transport: the finite checks, the rank-ordered sum (sync), the mean and
// the optimizer's out-of-place update, as a server runs them for each chunk.
// Beside it, memcpy of SIZE bytes measured in the same run.
//   ms/step    = time of one step (sync: the W pushes that make one update;
//                async: W pushes, W updates), median over rounds
//   GB/s in    = W * SIZE / step time: gradient bytes taken in per second
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
  std::int64_t split_bytes = std::int64_t{1} << 17;
  std::string mode = "sync", optimizer = "sgd", order = "rank", json;
  int trials = 3, rounds = 0;
};

struct Row {
  int threads = 1, workers = 0;
  double size_mib = 0, step_ms = 0, memcpy_ms = 0;
  double speedup = 0;  // vs the 1-thread row of the same size and workers; 0: none
  int wrong = 0;
};

// Median seconds per step; `wrong` counts weights off the expected value
// (every gradient is 1/1024, lr 1: exact in float32 for these step counts).
double apply_s(const Args& a, int threads, int workers, std::size_t num_bytes, int rounds, int& wrong) {
  const auto n = static_cast<std::int64_t>(num_bytes / sizeof(float));
  ParamLayout layout;
  layout.add("chunk", {n});
  const ShardMap map(layout, 1, n * static_cast<std::int64_t>(sizeof(float)));
  StoreOptions so;
  so.consistency = ConsistencyOptions{a.mode == "async" ? Mode::kAsync : Mode::kSync, 0};
  so.optimizer.name = a.optimizer == "adam" ? "adam" : "sgd";
  so.optimizer.momentum = a.optimizer == "momentum" ? 0.9 : 0.0;
  so.optimizer.weight_decay = 0.0;
  ApplyPool pool(threads, static_cast<std::size_t>(a.split_bytes) / sizeof(float));
  so.ranges = &pool;
  ShardStore store(map, 0, workers, so);
  store.init(0, std::vector<float>(static_cast<std::size_t>(n), 1.0f));
  const std::vector<float> grad(static_cast<std::size_t>(n), 1.0f / 1024.0f);
  std::vector<double> times;
  const int steps = rounds + 2;
  for (int step = 0; step < steps; ++step) {
    const auto t0 = Clock::now();
    for (int i = 0; i < workers; ++i) {
      const int w = a.order == "reverse" ? workers - 1 - i : i;
      (void)store.push(w, 0, step, grad, 1.0);
    }
    if (step >= 2) times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  if (a.optimizer == "sgd") {
    const int updates = a.mode == "async" ? steps * workers : steps;
    const float expect = 1.0f - static_cast<float>(updates) / 1024.0f;
    for (float x : store.snapshot(-1, 0, steps).values()) wrong += x != expect ? 1 : 0;
  }
  return bench::median(times);
}

// The 1-thread row of the same size and workers gives each row its speedup.
void add_speedups(std::vector<Row>& rows) {
  for (Row& r : rows) {
    for (const Row& base : rows) {
      if (base.threads == 1 && base.workers == r.workers && base.size_mib == r.size_mib) {
        r.speedup = base.step_ms / r.step_ms;
      }
    }
  }
}

void print_table(const Args& a, const std::vector<Row>& rows) {
  std::printf("# server apply, %s, %s, pushes in %s order, one chunk, parts >= %lld bytes; GB = 1e9 bytes\n",
              a.mode.c_str(), a.optimizer.c_str(), a.order.c_str(), static_cast<long long>(a.split_bytes));
  std::printf("%8s %8s %10s %12s %12s %14s %10s %9s %7s\n", "threads", "workers", "size(MiB)", "ms/step", "GB/s in",
              "memcpy(GB/s)", "memcpys", "speedup", "#wrong");
  for (const Row& r : rows) {
    const double bytes = r.size_mib * 1048576.0;
    char speedup[32] = "-";
    if (r.speedup > 0) std::snprintf(speedup, sizeof(speedup), "%.2fx", r.speedup);
    std::printf("%8d %8d %10.1f %12.3f %12.2f %14.2f %10.2f %9s %7d\n", r.threads, r.workers, r.size_mib, r.step_ms,
                r.workers * bytes / (r.step_ms * 1e6), bytes / (r.memcpy_ms * 1e6), r.step_ms / r.memcpy_ms, speedup,
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
        .add("threads", r.threads).add("split_bytes", a.split_bytes).add("workers", r.workers)
        .add("size_mib", r.size_mib).add("step_ms", r.step_ms).add("gbps_in", r.workers * bytes / (r.step_ms * 1e6))
        .add("memcpy_gbps", bytes / (r.memcpy_ms * 1e6)).add("memcpys_per_step", r.step_ms / r.memcpy_ms);
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
        std::vector<double> copies, steps;
        Row row{threads, workers, mib};
        for (int t = 0; t < a.trials; ++t) {
          copies.push_back(bench::memcpy_seconds(num_bytes, rounds));
          steps.push_back(apply_s(a, threads, workers, num_bytes, rounds, row.wrong));
        }
        row.step_ms = 1e3 * bench::median(steps);
        row.memcpy_ms = 1e3 * bench::median(copies);
        rows.push_back(row);
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
  app.add_option("--optimizer", a.optimizer, "sgd, momentum or adam")->check(CLI::IsMember({"sgd", "momentum", "adam"}));
  app.add_option("--order", a.order, "rank (pushes in rank order) or reverse (highest rank first)")
      ->check(CLI::IsMember({"rank", "reverse"}));
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
