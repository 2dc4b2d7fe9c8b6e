#include "worker/client/copy_pipeline.h"

#include <algorithm>
#include <chrono>
#include <iterator>
#include <string>

#include "common/base/errors.h"

namespace pstrain {

namespace {

std::size_t bytes_of(const Chunk& c) { return static_cast<std::size_t>(c.num_elems) * sizeof(float); }

// The id of the chunk holding element `elem` (chunks are sorted by offset and cover the flat buffer).
std::int64_t chunk_of(const ShardMap& map, std::int64_t elem) {
  const auto& chunks = map.chunks();
  auto it = std::upper_bound(chunks.begin(), chunks.end(), elem,
                             [](std::int64_t value, const Chunk& c) { return value < c.offset; });
  return it == chunks.begin() ? 0 : std::prev(it)->id;
}

}  // namespace

CopyPipeline::CopyPipeline(const ShardMap& map, nn::CopyEngine& engine, PipelineBuffers buffers, TraceRecorder* trace)
    : map_(map),
      engine_(engine),
      buffers_(buffers),
      trace_(trace),
      handled_(map.chunks().size(), false),
      pending_(map.chunks().size(), false),
      upload_event_(map.chunks().size(), 0) {
  const auto total = static_cast<std::size_t>(map.total_elems());
  const bool wide = buffers.host_grads.size() == total && buffers.host_params.size() == total;
  const bool narrow = buffers.wire_grads.size() == total && buffers.wire_params.size() == total;
  if (!wide && !narrow) {
    throw ConfigError("copy pipeline: host buffers of " + std::to_string(buffers.host_grads.size()) + " and " +
                      std::to_string(buffers.host_params.size()) + " floats, bfloat16 buffers of " +
                      std::to_string(buffers.wire_grads.size()) + " and " + std::to_string(buffers.wire_params.size()) +
                      " elements for a model of " + std::to_string(total) + " (one pair must match it)");
  }
  if (narrow) {
    buffers_.host_grads = {};
    buffers_.host_params = {};
    if (buffers.device_grads != nullptr || buffers.device_params != nullptr) engine.prepare_bfloat16(total);
  } else {
    buffers_.wire_grads = {};
    buffers_.wire_params = {};
  }
  if (trace_ != nullptr) comm_.submit([trace] { trace->name_this_thread("communication"); });
}

CopyPipeline::~CopyPipeline() = default;

void CopyPipeline::begin_step() { std::fill(handled_.begin(), handled_.end(), false); }

void CopyPipeline::grads_ready(std::int64_t offset, std::int64_t count, PushFn push) {
  std::vector<std::int64_t> keys = map_.chunks_within(offset, offset + count);
  std::erase_if(keys, [&](std::int64_t k) { return handled_[static_cast<std::size_t>(k)]; });
  if (keys.empty()) return;
  std::vector<nn::CopyEngine::Event> events(keys.size(), 0);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    handled_[static_cast<std::size_t>(keys[i])] = true;
    if (buffers_.device_grads == nullptr) continue;
    const Chunk& c = map_.chunk(keys[i]);
    events[i] = buffers_.bfloat16()
                    ? engine_.download_narrowed(buffers_.wire_grads.data(), buffers_.device_grads,
                                                static_cast<std::size_t>(c.offset),
                                                static_cast<std::size_t>(c.num_elems), keys[i])
                    : engine_.download(buffers_.host_grads.data() + c.offset, buffers_.device_grads + c.offset,
                                       bytes_of(c), keys[i]);
  }
  submit([this, keys = std::move(keys), events = std::move(events), push = std::move(push)] {
    push_when_copied(keys, events, push);
  });
}

void CopyPipeline::push_when_copied(const std::vector<std::int64_t>& keys,
                                    const std::vector<nn::CopyEngine::Event>& events, const PushFn& push) {
  // Each push: the next chunk once its download completed, with the chunks
  // after it whose downloads have completed by then (one request for what is ready).
  std::size_t i = 0;
  while (i < keys.size()) {
    engine_.wait(events[i]);
    std::size_t j = i + 1;
    while (j < keys.size() && engine_.done(events[j])) ++j;
    push(std::vector<std::int64_t>(keys.begin() + static_cast<std::ptrdiff_t>(i),
                                   keys.begin() + static_cast<std::ptrdiff_t>(j)));
    i = j;
  }
}

void CopyPipeline::begin_pull() {
  std::lock_guard lock(mutex_);
  std::fill(pending_.begin(), pending_.end(), true);
}

void CopyPipeline::chunk_arrived(std::int64_t key) {
  if (key < 0 || key >= static_cast<std::int64_t>(pending_.size())) return;
  {
    std::lock_guard lock(mutex_);
    const auto k = static_cast<std::size_t>(key);
    if (!pending_[k]) return;  // a pull outside the pipeline (initial weights, a probe)
    const Chunk& c = map_.chunk(key);
    if (buffers_.device_params != nullptr && buffers_.bfloat16()) {
      upload_event_[k] = engine_.upload_widened(buffers_.device_params, buffers_.wire_params.data(),
                                                static_cast<std::size_t>(c.offset),
                                                static_cast<std::size_t>(c.num_elems), key);
    } else if (buffers_.device_params != nullptr) {
      upload_event_[k] = engine_.upload(buffers_.device_params + c.offset, buffers_.host_params.data() + c.offset,
                                        bytes_of(c), key);
    }
    pending_[k] = false;
  }
  arrived_cv_.notify_all();
}

void CopyPipeline::pull_complete() {
  for (std::size_t k = 0; k < pending_.size(); ++k) chunk_arrived(static_cast<std::int64_t>(k));
}

nn::CopyEngine::Event CopyPipeline::wait_arrived(std::int64_t first, std::int64_t last) {
  std::unique_lock lock(mutex_);
  auto arrived = [&] {
    for (std::int64_t k = first; k <= last; ++k) {
      if (pending_[static_cast<std::size_t>(k)]) return false;
    }
    return true;
  };
  if (!arrived()) {
    ++waiting_;
    arrived_cv_.wait(lock, [&] { return failed_ || arrived(); });
    --waiting_;
  }
  if (failed_) {
    lock.unlock();
    rethrow_if_failed();
    throw Error("copy pipeline: the communication thread failed");
  }
  nn::CopyEngine::Event event = 0;
  for (std::int64_t k = first; k <= last; ++k) event = std::max(event, upload_event_[static_cast<std::size_t>(k)]);
  return event;
}

void CopyPipeline::before_forward(std::int64_t offset, std::int64_t count) {
  if (count <= 0 || map_.chunks().empty()) return;
  const auto start = std::chrono::steady_clock::now();
  TraceSpan span(trace_, TraceLevel::kSteps, "pull wait", "worker");
  span.arg("offset", offset).arg("elems", count);
  const std::int64_t first = chunk_of(map_, offset);
  const std::int64_t last = chunk_of(map_, offset + count - 1);
  engine_.order_compute_after(wait_arrived(first, last));
  forward_wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void CopyPipeline::finish_pull() {
  if (map_.chunks().empty()) return;
  engine_.wait(wait_arrived(0, static_cast<std::int64_t>(map_.chunks().size()) - 1));
  // Every upload enqueued before is complete too (events complete in order).
}

void CopyPipeline::submit(std::function<void()> job) {
  comm_.submit([this, job = std::move(job)] {
    try {
      job();
    } catch (...) {
      {
        std::lock_guard lock(mutex_);
        failed_ = true;
      }
      arrived_cv_.notify_all();
      throw;
    }
  });
}

void CopyPipeline::wait_jobs() {
  while (!comm_.wait_idle(std::chrono::hours(1))) {
  }
}

void CopyPipeline::rethrow_if_failed() { wait_jobs(); }

int CopyPipeline::waiting_for_arrival() const {
  std::lock_guard lock(mutex_);
  return waiting_;
}

}  // namespace pstrain
