#include "worker/train/ps_rejoin.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string_view>
#include <vector>

#include "common/base/errors.h"
#include "common/node/retry.h"
#include "common/node/scheduler_client.h"

namespace pstrain {

std::int64_t rejoin_ps_job(WorkerSession& session, std::span<float> params, const ClusterConfig& cluster, Logger& log) {
  KVClient& kv = session.kv();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(cluster.timeout_ms);
  RetryOptions retry;
  retry.interval = std::chrono::milliseconds(100);
  retry.watch = watch_scheduler(session.scheduler(), "worker " + std::to_string(session.rank()) + " was rejoining");
  retry.on_retry = [&log](const std::exception& e, int earlier) {
    if (earlier == 0) log.info(std::string("rejoin: a server does not know this worker yet; trying again: ") + e.what());
  };
  // A server has not heard of the rejoin yet: refused, asked again.
  const auto not_yet = [](const std::exception& e) { return dynamic_cast<const TransportError*>(&e) != nullptr; };
  const TicketResult probe = *retry_until(
      deadline,
      "rejoin: the servers did not take this worker back within cluster.timeout_ms (" +
          std::to_string(cluster.timeout_ms) + " ms)",
      not_yet, [&] { return std::optional(kv.wait(kv.pull(params, kPullRejoinProbe))); }, retry);
  std::int64_t join = 0;
  for (const auto& [key, next] : probe.next_steps) join = std::max(join, next);
  std::vector<std::int64_t> behind;
  for (const auto& [key, next] : probe.next_steps) {
    if (next < join) behind.push_back(key);
  }
  if (!behind.empty()) kv.wait(kv.push_skip(join - 1, behind));
  log.info("rejoined the job at step " + std::to_string(join) + " (" + std::to_string(probe.next_steps.size()) +
           " chunks; a skip push for step " + std::to_string(join - 1) + " to " + std::to_string(behind.size()) +
           " of them that were a step behind)");
  return join;
}

void pass_rejoin_checkpoint(SchedulerClient& scheduler, const RunConfig& config, std::int64_t join,
                            std::int64_t num_params, int num_servers, Logger& log,
                            const std::function<void()>& on_news, const WorkerCheckpoint* part) {
  if (!checkpoint_due(config, join)) return;
  const std::string name = "checkpoint " + std::to_string(join);
  if (part != nullptr) {
    write_worker_part(config, scheduler.rank(), *part);
    log.info("entering at checkpoint step " + std::to_string(join) + ": wrote its part, entering the others' barrier '" +
             name + "' (this process did not run the step before it)");
  } else {
    log.info("entering at checkpoint step " + std::to_string(join) + ": passing the others' barrier '" + name +
             "' without a part (this process did not run the step before it)");
  }
  const std::int64_t server_failures = scheduler.server_failures();
  if (on_news) {
    scheduler.barrier(name, on_news);
  } else {
    scheduler.barrier(name);
  }
  // The others count it live again: when it is the lowest (a restarted
  // worker 0), the manifest is its to write.
  finish_ps_checkpoint(scheduler, scheduler.rank(), config, join, num_params, num_servers, server_failures, log);
}

void enter_rejoined(SchedulerClient& scheduler, const RunConfig& config, std::int64_t join, std::int64_t num_params,
                    int num_servers, Logger& log, MembershipAnswers& answers, const EpochDriver::NextStep& after,
                    const std::function<WorkerCheckpoint()>& make_part) {
  const std::function<void()> answer = [&] { answers.answer_ahead(scheduler, scheduler.rank(), after); };
  scheduler.drain_incoming();  // a change announced since it registered (or pending then) is answered now
  answer();
  if (!checkpoint_due(config, join)) return;
  std::optional<WorkerCheckpoint> part;
  if (scheduler.released_checkpoint() < join && make_part) part = make_part();
  pass_rejoin_checkpoint(scheduler, config, join, num_params, num_servers, log, answer, part ? &*part : nullptr);
}

void pull_entry_weights(WorkerSession& session, std::span<float> weights, std::int64_t step,
                        const std::function<void()>& on_news) {
  KVClient& kv = session.kv();
  session.scheduler().answering_news(on_news, [&] { kv.wait(kv.pull(weights, step)); });
}

void write_rejoin_record(MetricsWriter& metrics, std::int64_t step) {
  metrics.write(JsonLine().add("type", "rejoin").add("time_s", metrics.elapsed_s()).add("step", step)
                    .add("job_s", metrics.job_s()));
}

TrainResult leave_retired_while_down(MetricsWriter& metrics, Logger& log, std::int64_t change) {
  const std::string by =
      change == kRetiredByRequest ? std::string("a request for fewer workers") : "membership change " + std::to_string(change);
  log.info("this rank was retired while it was down (" + by +
           " left it out): leaving without training (the job goes on without it)");
  metrics.write(JsonLine().add("type", "rejoin").add("time_s", metrics.elapsed_s()).add("step", std::int64_t{-1})
                    .add("job_s", metrics.job_s()).add("retired_by_change", change));
  TrainResult result;
  result.retired = true;
  result.time_s = metrics.elapsed_s();
  write_end_record(metrics, result);
  return result;
}

namespace {

// The number after "key": in a metrics line, if there is one.
std::optional<double> number_after(std::string_view line, std::string_view key) {
  const std::string quoted = "\"" + std::string(key) + "\":";
  const auto at = line.find(quoted);
  if (at == std::string_view::npos) return std::nullopt;
  const std::string rest(line.substr(at + quoted.size(), 32));
  char* end = nullptr;
  const double value = std::strtod(rest.c_str(), &end);
  if (end == rest.c_str()) return std::nullopt;
  return value;
}

// Where the rank's time axis starts on the job clock: job_s - time_s of the
// newest record in `text` that has both (a step, rejoin or resume record,
// written at one moment on both clocks); none in the file: nullopt.
std::optional<double> axis_origin_job_s(std::string_view text) {
  std::size_t end = text.size();
  while (end > 0) {
    const std::size_t start = text.rfind('\n', end - 1);
    const std::size_t from = start == std::string_view::npos ? 0 : start + 1;
    const std::string_view line = text.substr(from, end - from);
    const auto time_s = number_after(line, "time_s");
    const auto job_s = number_after(line, "job_s");
    if (time_s && job_s) return *job_s - *time_s;
    if (start == std::string_view::npos) break;
    end = start;
  }
  return std::nullopt;
}

}  // namespace

namespace {

std::string file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::int64_t whole_lines_bytes_of(const std::string& text) {
  const auto last = text.rfind('\n');
  return last == std::string::npos ? 0 : static_cast<std::int64_t>(last + 1);
}

}  // namespace

std::int64_t whole_lines_bytes(const std::string& path) { return whole_lines_bytes_of(file_text(path)); }

WorkerStart start_rejoined_worker(int rank, const RunConfig& config, Logger& log) {
  WorkerStart start;
  const std::string file = "worker-" + std::to_string(rank) + ".jsonl";
  std::int64_t keep = 0;
  // The rank's records stay on one time axis: its predecessor's (whose
  // origin its records give on the job clock), else the job clock's.
  double time_offset_s = log.clock().now_s();
  if (!config.output.run_dir.empty()) {
    const std::string text = file_text((std::filesystem::path(config.output.run_dir) / "metrics" / file).string());
    keep = whole_lines_bytes_of(text);
    if (const auto origin = axis_origin_job_s(std::string_view(text).substr(0, static_cast<std::size_t>(keep)))) {
      time_offset_s -= *origin;
    }
  }
  start.metrics = std::make_unique<MetricsWriter>(config.output.run_dir, file, keep, time_offset_s);
  start.metrics->set_log(&log);
  return start;
}

}  // namespace pstrain
