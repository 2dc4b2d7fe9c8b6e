#include "tools/report/metrics.h"

#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "common/base/errors.h"
#include "tools/report/json_value.h"

namespace pstrain::report {
namespace {

// The fields of one JSON object, read with errors that say where.
class Fields {
 public:
  Fields(const JsonValue& object, std::string where) : object_(object), where_(std::move(where)) {
    if (object.kind() != JsonValue::Kind::kObject) {
      throw DataError(where_ + ": expected a JSON object, got " + std::string(kind_name(object.kind())));
    }
  }

  const JsonValue& get(std::string_view key) const {
    const JsonValue* v = object_.find(key);
    if (v == nullptr) throw DataError(where_ + ": missing key '" + std::string(key) + "'");
    return *v;
  }
  std::string what(std::string_view key) const { return where_ + ": key '" + std::string(key) + "'"; }

  double number(std::string_view key) const {  // null: not finite
    const JsonValue& v = get(key);
    return v.is_null() ? std::numeric_limits<double>::quiet_NaN() : v.as_number(what(key));
  }
  std::int64_t integer(std::string_view key) const { return get(key).as_integer(what(key)); }
  // Keys added after the first runs were recorded: absent in older files.
  bool has(std::string_view key) const { return object_.find(key) != nullptr; }
  bool boolean(std::string_view key) const { return get(key).as_bool(what(key)); }
  const std::string& text(std::string_view key) const { return get(key).as_string(what(key)); }
  const std::string& where() const { return where_; }

 private:
  const JsonValue& object_;
  std::string where_;
};

StepRecord read_step(const Fields& f) {
  StepRecord r;
  r.time_s = f.number("time_s");
  r.step = f.integer("step");
  r.epoch = f.integer("epoch");
  r.batch = f.integer("batch");
  r.loss = f.number("loss");
  r.accuracy = f.number("accuracy");
  r.images_per_s = f.number("images_per_s");
  r.compute_ms = f.number("compute_ms");
  r.pull_ms = f.number("pull_ms");
  r.push_ms = f.number("push_ms");
  r.lr = f.number("lr");
  r.staleness = f.number("staleness");
  r.simulated = f.boolean("simulated");
  if (f.has("skipped")) r.skipped = f.boolean("skipped");
  return r;
}

EvalRecord read_eval(const Fields& f) {
  EvalRecord r;
  r.time_s = f.number("time_s");
  r.step = f.integer("step");
  r.epoch = f.integer("epoch");
  r.test_loss = f.number("test_loss");
  r.test_accuracy = f.number("test_accuracy");
  return r;
}

EndRecord read_end(const Fields& f) {
  EndRecord r;
  r.time_s = f.number("time_s");
  r.steps = f.integer("steps");
  r.images = f.integer("images");
  r.compute_s = f.number("compute_s");
  r.pull_s = f.number("pull_s");
  r.push_s = f.number("push_s");
  if (f.has("blocked_s")) r.blocked_s = f.number("blocked_s");
  if (f.has("skipped_steps")) r.skipped_steps = f.integer("skipped_steps");
  if (f.has("retired")) r.retired = f.boolean("retired");
  return r;
}

void add_record(WorkerMetrics& m, const Fields& f) {
  if (m.end) throw DataError(f.where() + ": a record after the \"end\" record");
  const std::string& type = f.text("type");
  if (type == "compute") {
    m.compute = ComputeRecord{f.text("backend"), f.text("conv_path"), f.text("conv_detail"), f.text("precision")};
  } else if (type == "plan") {
    m.plan = PlanRecord{f.integer("total_steps"), f.integer("steps_per_epoch"), f.integer("epochs")};
    if (f.has("epoch") && f.has("workers")) {
      m.plan_changes.push_back(PlanChange{f.integer("epoch"), f.has("step") ? f.integer("step") : -1, f.integer("workers"),
                                          f.has("reason") ? f.text("reason") : std::string()});
    }
  } else if (type == "step") {
    m.steps.push_back(read_step(f));
  } else if (type == "eval") {
    m.evals.push_back(read_eval(f));
  } else if (type == "end") {
    m.end = read_end(f);
  } else if (type == "rejoin") {
    m.rejoins.push_back(RejoinRecord{f.number("time_s"), f.integer("step"), m.steps.size(),
                                     f.has("retired_by_change") ? f.integer("retired_by_change") : 0});
  } else if (type == "resume") {
    m.resumes.push_back(ResumeRecord{f.number("time_s"), f.integer("step")});
  } else if (type == "join") {  // a joiner's start (worker/train/ps_join.h): its plan records say the rest
    m.joined_at = f.integer("step");
  } else if (type == "coverage") {
    m.coverage.push_back(CoverageRecord{f.integer("epoch"), f.integer("first_step"), f.integer("steps"),
                                        f.integer("samples"), f.text("checksum")});
  } else {
    throw DataError(f.what("type") + ": expected \"compute\", \"plan\", \"step\", \"eval\", \"rejoin\", \"resume\", " +
                    "\"join\", \"coverage\" or \"end\", got \"" + type + "\"");
  }
}

std::ifstream open_or_throw(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) throw DataError("cannot read " + file.string() + ": no such file or not readable");
  return in;
}

}  // namespace

std::filesystem::path worker_metrics_path(const std::filesystem::path& run_dir, int rank) {
  return run_dir / "metrics" / ("worker-" + std::to_string(rank) + ".jsonl");
}

std::filesystem::path server_metrics_path(const std::filesystem::path& run_dir, int rank) {
  return run_dir / "metrics" / ("server-" + std::to_string(rank) + ".json");
}

WorkerMetrics read_worker_metrics(const std::filesystem::path& file, int rank, bool may_be_cut) {
  std::ifstream in = open_or_throw(file);
  WorkerMetrics m;
  m.rank = rank;
  std::string line;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    if (line.empty()) continue;
    const bool last_unterminated = in.eof();  // getline hit the end without a newline
    const std::string where = file.string() + ":" + std::to_string(line_no);
    if (may_be_cut && last_unterminated) {
      try {
        add_record(m, Fields(parse_json(line, where), where));
      } catch (const DataError&) {
        // the process was killed while writing this record: it never happened
      }
      continue;
    }
    const JsonValue record = parse_json(line, where);
    add_record(m, Fields(record, where));
  }
  return m;
}

ServerMetrics read_server_metrics(const std::filesystem::path& file, int rank) {
  std::ifstream in = open_or_throw(file);
  std::stringstream text;
  text << in.rdbuf();
  const JsonValue doc = parse_json(text.str(), file.string());
  const Fields f(doc, file.string());
  ServerMetrics m;
  m.rank = static_cast<int>(f.integer("rank"));
  if (m.rank != rank) {
    throw DataError(f.what("rank") + ": expected " + std::to_string(rank) + " (from the file name), got " +
                    std::to_string(m.rank));
  }
  m.updates = f.integer("updates");
  m.pushes_accepted = f.integer("pushes_accepted");
  m.pushes_rejected = f.integer("pushes_rejected");
  if (f.has("partial_updates")) m.partial_updates = f.integer("partial_updates");
  if (f.has("clock_gap_max")) m.clock_gap_max = f.integer("clock_gap_max");
  if (f.has("rejoined_from_step")) m.rejoined_from_step = f.integer("rejoined_from_step");
  if (f.has("lost_updates")) m.lost_updates = f.integer("lost_updates");
  if (f.has("lost_pushes")) m.lost_pushes = f.integer("lost_pushes");
  if (f.has("duplicate_pushes")) m.duplicate_pushes = f.integer("duplicate_pushes");
  const JsonValue& hist = f.get("staleness_histogram");
  const Fields h(hist, f.what("staleness_histogram"));
  for (const std::string& key : hist.keys()) {
    std::size_t used = 0;
    long long staleness = -1;
    try {
      staleness = std::stoll(key, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != key.size() || staleness < 0) {
      throw DataError(h.where() + ": key '" + key + "' is not a staleness (a non-negative integer)");
    }
    m.staleness_histogram[staleness] = h.integer(key);
  }
  return m;
}

RunMetrics read_run_metrics(const std::filesystem::path& run_dir, int num_workers, int num_servers,
                            bool workers_may_be_lost, std::vector<std::string>* partial) {
  RunMetrics run;
  for (int w = 0; w < num_workers; ++w) {
    const std::filesystem::path file = worker_metrics_path(run_dir, w);
    if (partial != nullptr) {
      try {
        run.workers.push_back(read_worker_metrics(file, w, true));
      } catch (const DataError& e) {
        partial->push_back("worker " + std::to_string(w) + " left out: " + e.what());
        run.workers.push_back(WorkerMetrics{});
        run.workers.back().rank = w;
      }
      continue;
    }
    run.workers.push_back(read_worker_metrics(file, w, workers_may_be_lost));
    if (!run.workers.back().end && !workers_may_be_lost) {
      throw DataError(file.string() + ": no \"end\" record (did worker " + std::to_string(w) +
                      " finish? pstrain-summary --partial summarizes a run that did not)");
    }
  }
  for (int s = 0; s < num_servers; ++s) {
    if (partial == nullptr) {
      run.servers.push_back(read_server_metrics(server_metrics_path(run_dir, s), s));
      continue;
    }
    try {
      run.servers.push_back(read_server_metrics(server_metrics_path(run_dir, s), s));
    } catch (const DataError& e) {
      partial->push_back("server " + std::to_string(s) + " left out (a server writes its counts when it ends): " +
                         e.what());
    }
  }
  return run;
}

}  // namespace pstrain::report
