// The launcher's live status: the line's rendering (terminal width, plain),
// the recent-window rate and the ETA, reading metrics files as they grow
// (partial lines), and one prefix per echoed line.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <limits>

#include "tests/integration/launch_test_util.h"
#include "tools/launcher/line_prefix.h"
#include "tools/launcher/live_status.h"
#include "tools/launcher/metrics_tail.h"
#include "tools/launcher/status_line.h"

namespace {

using namespace pstrain::launcher;

WorkerStatus worker(int rank, std::int64_t done, std::int64_t total, std::optional<double> rate,
                    std::optional<double> loss = std::nullopt, std::optional<double> staleness = std::nullopt) {
  WorkerStatus w;
  w.rank = rank;
  w.steps_done = done;
  w.total_steps = total;
  w.steps_per_s = rate;
  w.loss = loss;
  w.staleness = staleness;
  return w;
}

StatusSnapshot two_workers(bool async) {
  StatusSnapshot s;
  s.elapsed_s = 12.345;
  s.async = async;
  s.workers = {worker(0, 342, 1000, 28.1, 0.40, 1.0), worker(1, 340, 1000, 28.0, 0.42, 1.6)};
  return s;
}

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

void append(const it::fs::path& file, const std::string& text) {
  std::ofstream(file, std::ios::app) << text << std::flush;
}

std::string step_json(double time_s, int step, const std::string& loss, double staleness = 0) {
  return "{\"type\":\"step\",\"time_s\":" + std::to_string(time_s) + ",\"step\":" + std::to_string(step) +
         ",\"loss\":" + loss + ",\"staleness\":" + std::to_string(staleness) + "}";
}

}  // namespace

TEST_CASE("status: the plain line has the job-clock prefix, progress, rate, loss, ETA and every worker") {
  const std::string line = render_plain(two_workers(false));
  CHECK(line ==
        "[  12.345 status] step 340/1000 34% | 28.0 steps/s | loss 0.4100 | ETA 24s | w0 342 28.1/s | w1 340 28.0/s");
  // ETA: the slowest to finish, (1000 - 340) / 28.0 = 23.6 s; the other needs 23.4 s.
  CHECK(eta_s(two_workers(false)).value() == doctest::Approx(660.0 / 28.0));
}

TEST_CASE("status: async adds the staleness; a finished worker says done; the end says done") {
  CHECK(it::contains(render_plain(two_workers(true)), " | staleness 1.30 | w0 "));
  CHECK_FALSE(it::contains(render_plain(two_workers(false)), "staleness"));
  StatusSnapshot s = two_workers(false);
  s.workers[0].finished = true;
  s.workers[0].steps_done = 1000;
  CHECK(it::contains(render_plain(s), "| w0 done | w1 340 28.0/s"));
  CHECK(eta_s(s).value() == doctest::Approx(660.0 / 28.0));
  s.workers[1].finished = true;
  s.workers[1].steps_done = 1000;
  CHECK(render_plain(s) == "[  12.345 status] done: 1000 steps | loss 0.4100 | w0 done | w1 done");
  CHECK(eta_s(s).value() == 0.0);
  s.workers[1].retired = true;  // an elastic shrink left it out: it says so
  CHECK(it::contains(render_plain(s), "| w0 done | w1 retired"));
}

TEST_CASE("status: before the first records, and without a rate, it says so instead of guessing") {
  StatusSnapshot s;
  s.elapsed_s = 0.5;
  s.workers = {worker(0, 0, -1, std::nullopt), worker(1, 0, -1, std::nullopt)};
  CHECK(render_plain(s) == "[   0.500 status] starting | - steps/s | ETA - | w0 0 | w1 0");
  CHECK_FALSE(eta_s(s).has_value());
  s.workers[0] = worker(0, 3, 100, 2.0);  // one worker has a rate, the other none: no ETA
  CHECK_FALSE(eta_s(s).has_value());
  s.workers[1] = worker(1, 5, 100, 0.0);  // a stalled worker: no ETA either
  CHECK_FALSE(eta_s(s).has_value());
}

TEST_CASE("status: the terminal line fits the width, leaving workers off before cutting") {
  const StatusSnapshot s = two_workers(false);
  const std::string full = render_plain(s);
  CHECK(render_terminal(s, full.size() + 1) == full);  // fits in width - 1 columns
  const std::string one_less = render_terminal(s, full.size());
  CHECK(one_less.size() <= full.size() - 1);
  CHECK(it::contains(one_less, "| w0 342 28.1/s | +1 more"));
  const std::string head = "[  12.345 status] step 340/1000 34% | 28.0 steps/s | loss 0.4100 | ETA 24s";
  CHECK(render_terminal(s, head.size() + 12) == head + " | +2 more");
  CHECK(render_terminal(s, head.size() + 1) == head);
  const std::string narrow = render_terminal(s, 30);
  CHECK(narrow.size() == 29);
  CHECK(narrow == "[  12.345 status] step 340...");
  for (std::size_t width : {0u, 1u, 2u, 3u, 4u, 40u, 80u, 200u}) {
    CAPTURE(width);
    CHECK(render_terminal(s, width).size() <= (width > 0 ? width - 1 : 0));
  }
  StatusSnapshot many = s;
  for (int w = 2; w < 64; ++w) many.workers.push_back(worker(w, 340, 1000, 28.0));
  const std::string line = render_terminal(many, 120);
  CHECK(line.size() <= 119);
  CHECK(it::contains(line, " more"));
}

TEST_CASE("status: duration text") {
  CHECK(duration_text(0.4) == "0s");
  CHECK(duration_text(59.4) == "59s");
  CHECK(duration_text(185) == "3m05s");
  CHECK(duration_text(3725) == "1h02m");
  CHECK(duration_text(-3) == "0s");
}

TEST_CASE("status: the rate is over the recent window, not since the start, and decays when steps stop") {
  StepWindow w(10.0);
  CHECK_FALSE(w.rate(1.0).has_value());
  w.add(1.0, 1, 2.0, 0);
  CHECK_FALSE(w.rate(1.0).has_value());  // one record: no rate yet
  // Slow at first (1 step/s for 20 s), then fast (10 steps/s for 10 s).
  for (int i = 2; i <= 20; ++i) w.add(i, i, 2.0, 0);
  for (int i = 1; i <= 100; ++i) w.add(20 + 0.1 * i, 20 + i, 1.0, 0);
  CHECK(w.steps_done() == 120);
  CHECK(w.rate(30.0).value() == doctest::Approx(10.0));  // (120 - 20) / (30 - 20); since the start: 4/s
  CHECK(w.mean_loss(30.0).value() == doctest::Approx(1.0));
  // No step for 5 s: the window (base: step 70 at 25.0) now holds 5 s without steps.
  CHECK(w.rate(35.05).value() == doctest::Approx((120.0 - 70.0) / 10.05));
  CHECK(w.rate(45.0).value() == doctest::Approx(0.0));
  CHECK(w.mean_loss(45.0).value() == doctest::Approx(1.0));  // nothing in the window: the last loss
  // A short history: the rate since the first record.
  StepWindow young(10.0);
  young.add(0.5, 1, kNaN, 0);
  young.add(1.5, 4, kNaN, 0);
  CHECK(young.rate(1.5).value() == doctest::Approx(3.0));
  CHECK_FALSE(young.mean_loss(1.5).has_value());  // simulated compute: no loss at all
}

TEST_CASE("status: a worker's progress from its records, its clock mapped onto the job clock") {
  WorkerProgress p(1, 10.0);
  p.add_line("{\"type\":\"plan\",\"time_s\":0,\"total_steps\":50,\"steps_per_epoch\":10,\"epochs\":5}", 3.0);
  // The worker started training at job time 3.0: its time_s t is job time 3 + t.
  // Read 0 to 0.2 s after they were written: the least delay gives the offset.
  for (int i = 0; i < 10; ++i) p.add_line(step_json(0.5 * (i + 1), i, "2.5", 2), 3.0 + 0.5 * (i + 1) + 0.1 * (i % 3));
  p.add_line("not json", 9.0);
  p.add_line("{\"type\":\"step\",\"time_s\":1}", 9.0);  // no step
  CHECK(p.bad_lines() == 2);
  WorkerStatus s = p.status(8.0);  // the worker's 5.0 s (offset 3.0 from the least-delayed read)
  CHECK(s.rank == 1);
  CHECK(s.total_steps == 50);
  CHECK(s.steps_done == 10);
  CHECK(s.steps_per_s.value() == doctest::Approx(9.0 / 4.5));  // base: the first record, 4.5 s before
  CHECK(s.loss.value() == doctest::Approx(2.5));
  CHECK(s.staleness.value() == doctest::Approx(2.0));
  CHECK_FALSE(s.finished);
  p.add_line("{\"type\":\"end\",\"time_s\":5.2,\"steps\":50,\"images\":1600,\"compute_s\":1,\"pull_s\":1,\"push_s\":1}",
             8.3);
  s = p.status(8.5);
  CHECK(s.finished);
  CHECK(s.steps_done == 50);
}

TEST_CASE("status: the tailer hands on complete lines only, as the file grows") {
  it::TempDir dir;
  const auto file = dir.path() / "metrics" / "worker-0.jsonl";
  MetricsTail tail(file);
  CHECK(tail.read_lines().empty());  // no file yet
  it::fs::create_directories(file.parent_path());
  append(file, "{\"a\":1}\n{\"b\"");
  auto lines = tail.read_lines();
  REQUIRE(lines.size() == 1);
  CHECK(lines[0] == "{\"a\":1}");
  CHECK(tail.read_lines().empty());  // the half-written line waits
  append(file, ":2}\n\n{\"c\":3}\n");
  lines = tail.read_lines();
  REQUIRE(lines.size() == 3);
  CHECK(lines[0] == "{\"b\":2}");
  CHECK(lines[1].empty());
  CHECK(lines[2] == "{\"c\":3}");
  CHECK(tail.read_lines().empty());
  it::write_file(file, "{\"new\":1}\n");  // rewritten (a new run): read from the start
  lines = tail.read_lines();
  REQUIRE(lines.size() == 1);
  CHECK(lines[0] == "{\"new\":1}");
}

TEST_CASE("echo: a line with the node's own logger prefix keeps it, any other line gets one") {
  CHECK(has_node_prefix("[   0.151 worker 1] epoch 0", "worker 1"));
  CHECK(has_node_prefix("[1234.500 worker 1] x", "worker 1"));
  CHECK(has_node_prefix("[   0.010 server] before the rank", "server 0"));  // the role alone
  CHECK(has_node_prefix("[  -0.002 scheduler] clock stepped back", "scheduler"));
  CHECK_FALSE(has_node_prefix("[   0.151 worker 10] x", "worker 1"));
  CHECK_FALSE(has_node_prefix("[   0.151 worker 0] x", "worker 1"));  // another node's line
  CHECK_FALSE(has_node_prefix("[worker 1] x", "worker 1"));
  CHECK_FALSE(has_node_prefix("[   abc worker 1] x", "worker 1"));
  CHECK_FALSE(has_node_prefix("pstrain-worker: error: out of memory", "worker 1"));
  CHECK_FALSE(has_node_prefix("", "worker 1"));
  CHECK(echo_line("[   0.151 worker 1] epoch 0", "worker 1", 9.0) == "[   0.151 worker 1] epoch 0");
  CHECK(echo_line("pstrain-worker: error: out of memory", "worker 1", 2.5) ==
        "[   2.500 worker 1] pstrain-worker: error: out of memory");
  CHECK(echo_line("", "worker 1", 2.5) == "[   2.500 worker 1] ");
}

TEST_CASE("status: a dropped or restarting worker is shown as such and no longer holds the headline back") {
  StatusSnapshot s = two_workers(false);
  s.workers.push_back(worker(2, 120, 1000, 0.0, 2.0));  // stopped at step 120 when it was lost
  s.workers[2].state = WorkerStatus::State::kDropped;
  CHECK(render_plain(s) == "[  12.345 status] step 340/1000 34% | 28.0 steps/s | loss 0.4100 | ETA 24s | "
                           "w0 342 28.1/s | w1 340 28.0/s | w2 dropped");
  s.workers[2].state = WorkerStatus::State::kRestarting;
  CHECK(it::contains(render_plain(s), "step 340/1000 34% | 28.0 steps/s | loss 0.4100 | ETA 24s |"));
  CHECK(it::contains(render_plain(s), "| w2 restarting"));
  // The live ones finished: the job is done, whatever the dropped one's step.
  s.workers[2].state = WorkerStatus::State::kDropped;
  for (int w = 0; w < 2; ++w) {
    s.workers[w].finished = true;
    s.workers[w].steps_done = 1000;
  }
  CHECK(render_plain(s) == "[  12.345 status] done: 1000 steps | loss 0.4100 | w0 done | w1 done | w2 dropped");
  CHECK(eta_s(s).value() == 0.0);
}

TEST_CASE("status: a worker retired by a shrink no longer holds the headline back, nor its end") {
  StatusSnapshot s = two_workers(false);
  s.workers.push_back(worker(2, 8, 1000, std::nullopt));  // left at its boundary, step 8 (or 0: retired while down)
  s.workers[2].finished = true;
  s.workers[2].retired = true;
  CHECK(render_plain(s) == "[  12.345 status] step 340/1000 34% | 28.0 steps/s | loss 0.4100 | ETA 24s | "
                           "w0 342 28.1/s | w1 340 28.0/s | w2 retired");
  for (int w = 0; w < 2; ++w) {
    s.workers[w].finished = true;
    s.workers[w].steps_done = 1000;
  }
  CHECK(render_plain(s) == "[  12.345 status] done: 1000 steps | loss 0.4100 | w0 done | w1 done | w2 retired");
}

TEST_CASE("status: a membership change (a plan record with workers) shows the workers sharing the training set") {
  StatusSnapshot s = two_workers(false);
  CHECK_FALSE(it::contains(render_plain(s), "workers"));
  s.workers[1].workers = 3;  // the first live worker that saw a change says how many
  CHECK(it::contains(render_plain(s), "| loss 0.4100 | ETA 24s | 3 workers | w0 342 28.1/s"));
  s.workers[0].workers = 4;
  CHECK(it::contains(render_plain(s), "| 4 workers |"));
  WorkerProgress p(0);
  p.add_line("{\"type\":\"plan\",\"time_s\":0,\"total_steps\":50,\"steps_per_epoch\":10,\"epochs\":5}", 1.0);
  CHECK(p.status(1.0).workers == -1);
  p.add_line("{\"type\":\"plan\",\"time_s\":1,\"total_steps\":70,\"steps_per_epoch\":15,\"epochs\":5,"
             "\"epoch\":1,\"workers\":2}", 2.0);
  CHECK(p.status(2.0).workers == 2);
  CHECK(p.status(2.0).total_steps == 70);
  CHECK(p.status(2.0).workers_reason.empty());
  // Elastic membership: the plan record's reason is shown beside the count.
  p.add_line("{\"type\":\"plan\",\"time_s\":2,\"total_steps\":60,\"steps_per_epoch\":12,\"epochs\":5,"
             "\"epoch\":2,\"workers\":4,\"step\":25,\"reason\":\"ctl\"}", 3.0);
  CHECK(p.status(3.0).workers == 4);
  CHECK(p.status(3.0).workers_reason == "ctl");
  s.workers[0] = p.status(3.0);
  CHECK(it::contains(render_plain(s), "| 4 workers (ctl) |"));
}

TEST_CASE("status: every ending has a done line, saying how it ended") {
  StatusSnapshot s = two_workers(false);
  s.ending = "interrupted";
  CHECK(render_plain(s) == "[  12.345 status] done (interrupted): step 340/1000 34% | loss 0.4100 | w0 342 28.1/s | "
                           "w1 340 28.0/s");
  s.ending = "failed";
  CHECK(it::contains(render_plain(s), "] done (failed): step 340/1000 34% | loss 0.4100 |"));
  s.workers = {worker(0, 0, -1, std::nullopt)};
  s.phase = "registering 2/2 servers 0/1 workers";
  CHECK(render_plain(s) == "[  12.345 status] done (failed): step 0 | w0 0");
  s.ending = "";
  s.workers[0].finished = true;
  s.workers[0].steps_done = 50;
  CHECK(render_plain(s) == "[  12.345 status] done: 50 steps | w0 done");
}

TEST_CASE("status: the phase before the first step, evaluating after the last, epoch, accuracy and checkpoint") {
  StatusSnapshot s;
  s.elapsed_s = 1.5;
  s.workers = {worker(0, 0, -1, std::nullopt), worker(1, 0, -1, std::nullopt)};
  s.phase = "registering 2/2 servers 1/2 workers";
  CHECK(render_plain(s) == "[   1.500 status] registering 2/2 servers 1/2 workers | - steps/s | ETA - | w0 0 | w1 0");
  s.workers = {worker(0, 64, 96, 10.0, 0.25), worker(1, 60, 96, 10.0, 0.35)};
  s.workers[1].epoch = 1;
  s.workers[1].epochs = 3;
  s.workers[0].test_accuracy = 0.96875;
  s.checkpoint_step = 40;
  CHECK(render_plain(s) == "[   1.500 status] step 60/96 62% | epoch 2/3 | 10.0 steps/s | loss 0.3000 | acc 96.88% | "
                           "ETA 4s | checkpoint step 40 | w0 64 10.0/s | w1 60 10.0/s");
  s.workers[0].steps_done = 96;
  s.workers[1].steps_done = 96;
  s.workers[0].epoch = 2;  // equal steps: the lowest rank is the slowest
  s.workers[0].epochs = 3;
  CHECK(it::contains(render_plain(s), "] step 96/96 100% evaluating | epoch 3/3 |"));
}

TEST_CASE("status: the loss is a moving average of the last steps' losses, not a long window's mean") {
  WorkerProgress p(0, 10.0);
  p.add_line("{\"type\":\"plan\",\"time_s\":0,\"total_steps\":100,\"steps_per_epoch\":50,\"epochs\":2}", 0.0);
  for (int i = 0; i < 40; ++i) p.add_line(step_json(0.1 * (i + 1), i, "2.5"), 0.1 * (i + 1));
  for (int i = 40; i < 60; ++i) p.add_line(step_json(0.1 * (i + 1), i, "0.03"), 0.1 * (i + 1));
  const WorkerStatus s = p.status(6.0);
  // 20 steps at 0.03 after 40 at 2.5: the EMA (weight 0.2) is within 2.47 * 0.8^20 = 0.029 of 0.03;
  // the 10 s window's mean was 1.68.
  CHECK(s.loss.value() == doctest::Approx(0.03 + 2.47 * std::pow(0.8, 20)));
  CHECK(s.loss.value() < 0.07);
  CHECK(s.epochs == 2);
  CHECK(s.epoch == -1);  // no step record said its epoch
  p.add_line("{\"type\":\"step\",\"time_s\":6.05,\"step\":60,\"epoch\":1,\"loss\":0.03}", 6.05);
  CHECK(p.status(6.1).epoch == 1);
  p.add_line("{\"type\":\"eval\",\"time_s\":6.1,\"step\":59,\"epoch\":0,\"test_loss\":0.1,\"test_accuracy\":0.9}", 6.1);
  CHECK(p.status(6.2).test_accuracy.value() == doctest::Approx(0.9));
}

TEST_CASE("status: on resume the earlier lines give the plan only, and progress starts at the resume point") {
  it::TempDir dir;
  const auto file = dir.path() / "metrics" / "worker-0.jsonl";
  it::fs::create_directories(file.parent_path());
  std::string before = "{\"type\":\"plan\",\"time_s\":0,\"total_steps\":100,\"steps_per_epoch\":50,\"epochs\":2}\n";
  for (int i = 0; i < 70; ++i) before += step_json(0.1 * (i + 1), i, "1.0") + "\n";  // killed at step 69
  append(file, before);
  std::FILE* out = std::tmpfile();
  REQUIRE(out != nullptr);
  LiveStatusOptions o;
  o.run_dir = dir.path();
  o.num_workers = 1;
  o.out = out;
  o.interval_s = 1000;
  o.redraw_s = 0;  // every tick reads the files
  o.resume = true;
  LiveStatus status(o);
  status.tick();
  WorkerStatus w = status.snapshot().workers.at(0);
  CHECK(w.steps_done == 0);  // none of the interrupted run's progress
  CHECK(w.total_steps == 100);
  CHECK_FALSE(w.steps_per_s.has_value());
  append(file, "{\"type\":\"resume\",\"time_s\":7.5,\"step\":40}\n");
  status.tick();
  CHECK(status.snapshot().workers.at(0).steps_done == 40);  // the checkpoint's step
  append(file, step_json(7.6, 40, "0.5") + "\n");
  status.tick();
  w = status.snapshot().workers.at(0);
  CHECK(w.steps_done == 41);
  CHECK(w.loss.value() == doctest::Approx(0.5));
  std::fclose(out);
}

TEST_CASE("status: the scheduler's registration lines give the phase; a server's checkpoint line the step") {
  it::TempDir dir;
  std::FILE* out = std::tmpfile();
  REQUIRE(out != nullptr);
  LiveStatusOptions o;
  o.run_dir = dir.path();
  o.num_workers = 2;
  o.out = out;
  o.interval_s = 1000;
  o.redraw_s = 0;  // every tick reads the files
  LiveStatus status(o);
  status.node_line("scheduler", "[   0.210 scheduler] registered server from h (pid 7); registered 1/2 servers and "
                                "0/2 workers");
  CHECK(status.snapshot().phase == "registering 1/2 servers 0/2 workers");
  status.node_line("worker 0", "[   0.300 worker 0] registered 9/9 servers and 9/9 workers");  // not the scheduler's
  CHECK(status.snapshot().phase == "registering 1/2 servers 0/2 workers");
  status.node_line("scheduler", "[   0.500 scheduler] rendezvous complete: 4 tensors, 100 parameters");
  CHECK(status.snapshot().phase.empty());
  status.node_line("server 1", "[   3.000 server 1] checkpoint step-00000040: wrote server-1.part (3 chunks, 0.1 MB "
                               "of state) in 1.0 ms");
  CHECK(status.snapshot().checkpoint_step.value() == 40);
  status.node_line("server 0", "[   3.100 server 0] checkpoint step-00000020: wrote server-0.part");  // older
  CHECK(status.snapshot().checkpoint_step.value() == 40);
  status.set_worker_state(1, WorkerStatus::State::kRestarting);
  CHECK(status.snapshot().workers.at(1).state == WorkerStatus::State::kRestarting);
  it::fs::create_directories(dir.path() / "metrics");
  append(dir.path() / "metrics" / "worker-1.jsonl", "{\"type\":\"rejoin\",\"time_s\":4.0,\"step\":40}\n");
  status.tick();
  CHECK(status.snapshot().workers.at(1).state == WorkerStatus::State::kLive);  // its new process rejoined
  status.set_worker_state(0, WorkerStatus::State::kDropped);
  CHECK(status.snapshot().workers.at(0).state == WorkerStatus::State::kDropped);
  status.finish("interrupted");
  std::rewind(out);
  char buf[512] = {};
  const std::size_t n = std::fread(buf, 1, sizeof(buf) - 1, out);
  const std::string written(buf, n);
  CHECK(it::contains(written, " status] done (interrupted): "));
  CHECK(it::contains(written, "| w0 dropped | w1 "));
  std::fclose(out);
}

// The scheduler's record of an abandoned join (metrics/scheduler.jsonl): the
// joiner's slot says "join abandoned" (not "dropped": it never was a member),
// also when the launcher reports its exit after the record; a later joiner
// started into the slot is live, and an abandonment from before its start is
// not taken for its own.
TEST_CASE("status: an abandoned join (the scheduler's record) shows as 'wR join abandoned' until a new joiner starts") {
  it::TempDir dir;
  std::FILE* out = std::tmpfile();
  REQUIRE(out != nullptr);
  LiveStatusOptions o;
  o.run_dir = dir.path();
  o.num_workers = 2;
  o.out = out;
  o.interval_s = 1000;
  o.redraw_s = 0;  // every tick reads the files
  o.clock = pstrain::JobClock(pstrain::JobClock::unix_now_us() - 100'000'000);  // 100 s into the job
  LiveStatus status(o);
  status.start_joiner(2);  // at about 100 s
  status.tick();
  CHECK(status.snapshot().workers.at(2).state == WorkerStatus::State::kLive);
  const auto records = dir.path() / "metrics" / "scheduler.jsonl";
  it::fs::create_directories(records.parent_path());
  append(records, "{\"type\":\"join_abandoned\",\"time_s\":150.5,\"rank\":2,\"change\":1,\"pid\":7,\"host\":\"h\","
                  "\"reason\":\"worker 2 (h, pid 7) was killed by signal 9 (Killed) (reported by the launcher)\"}\n");
  status.tick();
  CHECK(status.snapshot().workers.at(2).state == WorkerStatus::State::kAbandoned);
  status.set_worker_state(2, WorkerStatus::State::kDropped);  // the launcher saw it exit
  CHECK(status.snapshot().workers.at(2).state == WorkerStatus::State::kAbandoned);
  CHECK(it::contains(status_text(status.snapshot()), "| w2 join abandoned"));
  // A joiner started by hand into slot 4: the record alone makes the launcher show the slot.
  append(records, "{\"type\":\"join_abandoned\",\"time_s\":160,\"rank\":4,\"change\":2,\"pid\":8,\"host\":\"h\","
                  "\"reason\":\"no step of the job is left to join at\"}\n");
  status.tick();
  REQUIRE(status.snapshot().workers.size() == 5);
  CHECK(status.snapshot().workers.at(3).state == WorkerStatus::State::kLive);
  CHECK(status.snapshot().workers.at(4).state == WorkerStatus::State::kAbandoned);
  // A second grow starts a new joiner into slot 2 (at about 100 s): live; a record of an
  // abandonment from before its start (99 s, read only now) is about the earlier process.
  status.start_joiner(2);
  CHECK(status.snapshot().workers.at(2).state == WorkerStatus::State::kLive);
  append(records, "{\"type\":\"join_abandoned\",\"time_s\":99,\"rank\":2,\"change\":1,\"pid\":6,\"host\":\"h\","
                  "\"reason\":\"silent\"}\n");
  status.tick();
  CHECK(status.snapshot().workers.at(2).state == WorkerStatus::State::kLive);
  append(records, "not a record\n");  // ignored (the summary names a malformed line)
  status.tick();
  status.finish("");
  std::rewind(out);
  char buf[1024] = {};
  const std::size_t n = std::fread(buf, 1, sizeof(buf) - 1, out);
  CHECK(it::contains(std::string(buf, n), "| w4 join abandoned"));
  std::fclose(out);
}
