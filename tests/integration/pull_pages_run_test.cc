// Pulled weights mapped, not copied (worker/client/pull_pages.h), on real
// scheduler, server and worker processes through `launch`: over the default
// shm transport a worker maps the whole pages of each large chunk of a pull
// reply from the server's arena into its model (fmnist_cnn: fc1's 1 MiB
// chunks, conv2) and holds the reply until it pushes that chunk. A job so
// run ends with the weights.bin of the same job over tcp (every reply
// copied), bit for bit: sync with two workers (the final evaluation, its
// loss and accuracy as recorded, and weights.bin read the final pull's
// weights), async and ssp with one (their
// order is then fixed). The worker's log says how many replies it mapped and
// how many times it mapped pages anew: once per chunk in a job of one
// server process per chunk (the server updates in the pages the worker
// maps, since the worker hands each reply back before it pushes).
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <regex>
#include <string>
#include <vector>

#include "tests/integration/launch_test_util.h"
#include "worker/train/checkpoint.h"

namespace {

it::fs::path train(const it::TempDir& dir, const std::string& name, const std::vector<std::string>& sets) {
  const auto run = dir.path() / name;
  auto args = it::launch_args(it::kSourceDir / "configs" / "tiny_sync.toml", run);
  for (const std::string& s : sets) args.insert(args.end(), {"--set", s});
  args.insert(args.end(), {"--set", "workload.model=fmnist_cnn", "--set", "workload.max_steps=12", "--quiet"});
  const it::Result r = it::run_launch(args, dir.path());
  INFO(r.output);
  REQUIRE(r.exit.code == 0);
  return run;
}

// The worker's count of replies mapped into its model and of pages mapped anew (-1, -1: no such line).
std::pair<long, long> mapped(const it::fs::path& run, int worker) {
  const std::string log = it::read_file(run / "logs" / ("worker-" + std::to_string(worker) + ".log"));
  std::smatch m;
  static const std::regex line(R"(pull replies mapped into the model instead of copied: (\d+) \(pages mapped anew: (\d+)\))");
  if (!std::regex_search(log, m, line)) return {-1, -1};
  return {std::stol(m[1]), std::stol(m[2])};
}

// Worker 0's evaluations as recorded: "test_loss":...,"test_accuracy":... per eval record.
std::vector<std::string> evaluations(const it::fs::path& run) {
  const std::string metrics = it::read_file(run / "metrics" / "worker-0.jsonl");
  static const std::regex eval(R"re("type":"eval".*?("test_loss":[^,]+,"test_accuracy":[^,]+))re");
  std::vector<std::string> out;
  for (auto it = std::sregex_iterator(metrics.begin(), metrics.end(), eval); it != std::sregex_iterator(); ++it) {
    out.push_back((*it)[1]);
  }
  return out;
}

void same_weights(const it::fs::path& a, const it::fs::path& b) {
  const std::vector<float> wa = pstrain::read_weights(pstrain::weights_path(a.string()));
  const std::vector<float> wb = pstrain::read_weights(pstrain::weights_path(b.string()));
  REQUIRE(wa.size() > 3000000);  // fmnist_cnn: 3.27M parameters
  REQUIRE(wa.size() == wb.size());
  CHECK(std::memcmp(wa.data(), wb.data(), wa.size() * sizeof(float)) == 0);
}

}  // namespace

TEST_CASE("pulled pages: sync on shm maps the large chunks' pages and ends with tcp's weights, bit for bit") {
  it::TempDir dir;
  const it::fs::path shm = train(dir, "shm", {"mode=sync", "cluster.workers=2"});
  const it::fs::path tcp = train(dir, "tcp", {"mode=sync", "cluster.workers=2", "cluster.transport=tcp"});
  same_weights(shm, tcp);
  // The final evaluation, after the last push, read the final pull's weights: tcp's loss and accuracy.
  const std::vector<std::string> evals = evaluations(shm);
  REQUIRE_FALSE(evals.empty());
  CHECK(evals == evaluations(tcp));
  for (int w = 0; w < 2; ++w) {
    const auto [taken, maps] = mapped(shm, w);
    INFO("worker " << w);
    // 13 pulls (the initial weights, 12 steps; worker 0 one more for the final evaluation),
    // 14 chunks of fmnist_cnn large enough to map each.
    CHECK(taken >= 13 * 14);
    CHECK(maps >= 14);
    CHECK(maps * 4 <= taken);  // mostly the same pages again: the server updated in place
  }
  CHECK(mapped(tcp, 0).first == -1);  // over tcp every reply is copied
}

TEST_CASE("pulled pages: async and ssp of one worker on shm end with tcp's weights, bit for bit") {
  it::TempDir dir;
  for (const std::string mode : {"async", "ssp"}) {
    INFO(mode);
    const it::fs::path shm = train(dir, mode + "-shm", {"mode=" + mode, "cluster.workers=1"});
    const it::fs::path tcp = train(dir, mode + "-tcp", {"mode=" + mode, "cluster.workers=1", "cluster.transport=tcp"});
    same_weights(shm, tcp);
    const auto [taken, maps] = mapped(shm, 0);
    CHECK(taken >= 13 * 14);
    CHECK(maps * 4 <= taken);
  }
}

// The number of step records in worker `w`'s metrics file.
int steps_of(const it::fs::path& run, int w) {
  const std::string text = it::read_file(run / "metrics" / ("worker-" + std::to_string(w) + ".jsonl"));
  int n = 0;
  for (auto at = text.find("\"type\":\"step\""); at != std::string::npos; at = text.find("\"type\":\"step\"", at + 1)) ++n;
  return n;
}

// More workers than the pair above: the sum is still in rank order and the job still ends with
// tcp's weights, bit for bit; every worker maps each step's pull of the 14 large chunks (8 workers
// run 8 steps: 2 epochs of 4; 4 workers 12). Only a chunk's first reply may come the usual way,
// while its arena is offered to the connection.
TEST_CASE("pulled pages: sync with 4 and 8 workers on shm ends with tcp's weights, bit for bit; every worker maps") {
  it::TempDir dir;
  for (const int workers : {4, 8}) {
    INFO(workers << " workers");
    const std::string n = "cluster.workers=" + std::to_string(workers);
    const it::fs::path shm = train(dir, "shm-" + std::to_string(workers), {"mode=sync", n});
    const it::fs::path tcp = train(dir, "tcp-" + std::to_string(workers), {"mode=sync", n, "cluster.transport=tcp"});
    same_weights(shm, tcp);
    CHECK(evaluations(shm) == evaluations(tcp));
    for (int w = 0; w < workers; ++w) {
      INFO("worker " << w);
      const int steps = steps_of(shm, w);
      CHECK(steps == (workers == 8 ? 8 : 12));
      const auto [taken, maps] = mapped(shm, w);
      CHECK(taken >= steps * 14);  // each step's pull: its 14 large chunks mapped
      CHECK(maps >= 14);
      CHECK(maps * 4 <= taken);    // mostly the same pages again: the server updated in place
    }
  }
}
