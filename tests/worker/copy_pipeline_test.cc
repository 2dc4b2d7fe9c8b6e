// The parameter-server worker's copy pipeline (worker/client/copy_pipeline.h)
// on a fake copy engine that the test releases copy by copy: events, order,
// a push never before its chunks' downloads completed, a forward never before
// its layer's weights arrived and were uploaded. And the host copy engine.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "common/base/bfloat16.h"
#include "common/base/errors.h"
#include "common/math/param_layout.h"
#include "common/math/shard_map.h"
#include "tests/support/throw_text.h"
#include "tests/support/wait.h"
#include "worker/client/copy_pipeline.h"
#include "worker/client/host_copy_engine.h"

namespace {

using namespace std::chrono_literals;
using pstrain::CopyPipeline;
using pstrain::nn::CopyEngine;
using pstrain::test::wait_until;

// A copy engine whose copies run only when the test says so (release), in order.
class FakeCopyEngine final : public CopyEngine {
 public:
  std::string_view kind() const override { return "fake"; }
  Event download(void* dst, const void* src, std::size_t n, std::int64_t chunk) override {
    return enqueue(dst, src, n, chunk, Direction::kDownload);
  }
  Event upload(void* dst, const void* src, std::size_t n, std::int64_t chunk) override {
    return enqueue(dst, src, n, chunk, Direction::kUpload);
  }
  bool done(Event e) override {
    std::lock_guard lock(mutex_);
    return e <= completed_;
  }
  void wait(Event e) override {
    std::unique_lock lock(mutex_);
    ++waiters_;
    cv_.wait(lock, [&] { return e <= completed_; });
    --waiters_;
  }
  void order_compute_after(Event e) override {
    {
      std::lock_guard lock(mutex_);
      ordered_after_.push_back(e);
    }
    wait(e);  // the host's rule: the forward runs after the upload
  }
  void register_host(void*, std::size_t) override {}
  void prepare_bfloat16(std::size_t n) override { prepared_ = n; }
  Event download_narrowed(std::uint16_t* host, const float* device, std::size_t offset, std::size_t n,
                          std::int64_t chunk) override {
    REQUIRE(offset + n <= prepared_);
    return enqueue(host + offset, device + offset, n, chunk, Direction::kDownload, Convert::kNarrow);
  }
  Event upload_widened(float* device, const std::uint16_t* host, std::size_t offset, std::size_t n,
                       std::int64_t chunk) override {
    REQUIRE(offset + n <= prepared_);
    return enqueue(device + offset, host + offset, n, chunk, Direction::kUpload, Convert::kWiden);
  }

  // Runs the next `n` copies (conversions: the host's, common/base/bfloat16.h).
  void release(int n) {
    std::lock_guard lock(mutex_);
    for (int i = 0; i < n && !queue_.empty(); ++i) {
      const Copy c = queue_.front();
      queue_.pop_front();
      if (c.convert == Convert::kNarrow) {
        pstrain::to_bfloat16(std::span(static_cast<const float*>(c.src), c.n),
                             std::span(static_cast<std::uint16_t*>(c.dst), c.n));
      } else if (c.convert == Convert::kWiden) {
        pstrain::from_bfloat16(std::span(static_cast<const std::uint16_t*>(c.src), c.n),
                               std::span(static_cast<float*>(c.dst), c.n));
      } else {
        std::memcpy(c.dst, c.src, c.n);
      }
      ++completed_;
    }
    cv_.notify_all();
  }
  // Per copy in enqueue order: whether it converted (narrow / widen).
  std::vector<bool> converted() {
    std::lock_guard lock(mutex_);
    return converted_;
  }
  int waiters() {
    std::lock_guard lock(mutex_);
    return waiters_;
  }
  Event enqueued() {
    std::lock_guard lock(mutex_);
    return enqueued_;
  }
  std::vector<std::pair<Direction, std::int64_t>> log() {
    std::lock_guard lock(mutex_);
    return log_;
  }
  std::vector<Event> ordered_after() {
    std::lock_guard lock(mutex_);
    return ordered_after_;
  }

 private:
  enum class Convert { kNone, kNarrow, kWiden };
  struct Copy {
    void* dst;
    const void* src;
    std::size_t n;  // bytes; conversions: elements
    Convert convert;
  };
  Event enqueue(void* dst, const void* src, std::size_t n, std::int64_t chunk, Direction d,
                Convert convert = Convert::kNone) {
    std::lock_guard lock(mutex_);
    queue_.push_back(Copy{dst, src, n, convert});
    log_.emplace_back(d, chunk);
    converted_.push_back(convert != Convert::kNone);
    return ++enqueued_;
  }
  std::size_t prepared_ = 0;
  std::vector<bool> converted_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Copy> queue_;
  std::vector<std::pair<Direction, std::int64_t>> log_;
  std::vector<Event> ordered_after_;
  Event enqueued_ = 0, completed_ = 0;
  int waiters_ = 0;
};

// Two layers: w1 [4,5] b1 [4] | w2 [3,4] b2 [3]; 10-float chunks:
// 0, 1 (w1), 2 (b1), 3, 4 (w2), 5 (b2). Layer 1 = [0, 24), layer 2 = [24, 39).
pstrain::ShardMap two_layers() {
  pstrain::ParamLayout layout;
  layout.add("w1", {4, 5});
  layout.add("b1", {4});
  layout.add("w2", {3, 4});
  layout.add("b2", {3});
  return pstrain::ShardMap(layout, 2, 40);
}

struct Fixture {
  pstrain::ShardMap map = two_layers();
  std::vector<float> host_grads = std::vector<float>(39, 0.0f), host_params = std::vector<float>(39, 0.0f);
  std::vector<float> device_grads = std::vector<float>(39), device_params = std::vector<float>(39, -1.0f);
  FakeCopyEngine engine;
  std::mutex mutex;
  std::vector<std::vector<std::int64_t>> pushes;  // keys of each push, in order
  bool push_saw_stale = false;                    // a push read a chunk before its download

  Fixture() {
    for (std::size_t i = 0; i < device_grads.size(); ++i) device_grads[i] = 1.0f + static_cast<float>(i);
    for (std::size_t i = 0; i < host_params.size(); ++i) host_params[i] = 100.0f + static_cast<float>(i);
  }
  pstrain::PipelineBuffers buffers(bool with_device_grads = true) {
    return {host_grads, host_params, with_device_grads ? device_grads.data() : nullptr, device_params.data()};
  }
  CopyPipeline::PushFn push_fn() {
    return [this](const std::vector<std::int64_t>& keys) {
      std::lock_guard lock(mutex);
      for (std::int64_t k : keys) {
        const pstrain::Chunk& c = map.chunk(k);
        for (std::int64_t i = c.offset; i < c.offset + c.num_elems; ++i) {
          if (host_grads[static_cast<std::size_t>(i)] != device_grads[static_cast<std::size_t>(i)]) push_saw_stale = true;
        }
      }
      pushes.push_back(keys);
    };
  }
  std::size_t num_pushes() {
    std::lock_guard lock(mutex);
    return pushes.size();
  }
};

}  // namespace

TEST_CASE("copy pipeline: each chunk is pushed once its download completed, with the others copied by then") {
  Fixture f;
  CopyPipeline pipeline(f.map, f.engine, f.buffers());
  pipeline.begin_step();
  pipeline.grads_ready(24, 15, f.push_fn());  // layer 2 first (backward order): chunks 3, 4, 5
  pipeline.grads_ready(0, 24, f.push_fn());   // then layer 1: chunks 0, 1, 2
  using D = CopyEngine::Direction;
  CHECK(f.engine.log() == std::vector<std::pair<D, std::int64_t>>{
                              {D::kDownload, 3}, {D::kDownload, 4}, {D::kDownload, 5},
                              {D::kDownload, 0}, {D::kDownload, 1}, {D::kDownload, 2}});
  // The communication thread waits on chunk 3's download: nothing pushed yet.
  REQUIRE(wait_until([&] { return f.engine.waiters() == 1; }, 10s, "the push job waiting on chunk 3's download"));
  CHECK(f.num_pushes() == 0);
  f.engine.release(2);  // chunks 3 and 4 copied (at once), 5 still pending
  REQUIRE(wait_until([&] { return f.num_pushes() == 1; }, 10s, "chunks 3 and 4 pushed"));
  REQUIRE(wait_until([&] { return f.engine.waiters() == 1; }, 10s, "the push job waiting on chunk 5's download"));
  CHECK(f.num_pushes() == 1);
  f.engine.release(1);
  REQUIRE(wait_until([&] { return f.num_pushes() == 2; }, 10s, "chunk 5 pushed"));
  f.engine.release(3);  // layer 1's three chunks at once: one push
  pipeline.grads_ready(0, 39, f.push_fn());  // "anything not yet sent": nothing
  pipeline.wait_jobs();
  CHECK(f.pushes == std::vector<std::vector<std::int64_t>>{{3, 4}, {5}, {0, 1, 2}});
  CHECK_FALSE(f.push_saw_stale);
  CHECK(f.engine.enqueued() == 6);  // each chunk downloaded once

  SUBCASE("the next step downloads every chunk again") {
    pipeline.begin_step();
    pipeline.grads_ready(0, 39, f.push_fn());
    f.engine.release(6);
    pipeline.wait_jobs();
    CHECK(f.pushes.back() == std::vector<std::int64_t>{0, 1, 2, 3, 4, 5});
    CHECK(f.engine.enqueued() == 12);
  }
}

TEST_CASE("copy pipeline: gradients already on the host (simulated compute) are pushed without copies") {
  Fixture f;
  CopyPipeline pipeline(f.map, f.engine, f.buffers(false));
  pipeline.begin_step();
  pipeline.grads_ready(24, 15, [&](const std::vector<std::int64_t>& keys) {
    std::lock_guard lock(f.mutex);
    f.pushes.push_back(keys);
  });
  pipeline.wait_jobs();
  CHECK(f.pushes == std::vector<std::vector<std::int64_t>>{{3, 4, 5}});
  CHECK(f.engine.enqueued() == 0);
}

TEST_CASE("copy pipeline: a layer's forward waits for its own chunks' arrival and upload, not for the others") {
  Fixture f;
  CopyPipeline pipeline(f.map, f.engine, f.buffers());
  pipeline.begin_pull();
  std::atomic<int> layers_run{0};
  std::vector<float> seen_at_forward(39, 0.0f);
  std::thread training([&] {
    pipeline.before_forward(0, 24);  // layer 1
    std::copy(f.device_params.begin(), f.device_params.begin() + 24, seen_at_forward.begin());
    layers_run = 1;
    pipeline.before_forward(24, 15);  // layer 2
    std::copy(f.device_params.begin() + 24, f.device_params.end(), seen_at_forward.begin() + 24);
    layers_run = 2;
  });
  REQUIRE(wait_until([&] { return pipeline.waiting_for_arrival() == 1; }, 10s, "layer 1 waiting for its chunks"));
  // Layer 2's chunks arrive first (and are uploaded): layer 1 still waits.
  for (std::int64_t k : {3, 4, 5}) pipeline.chunk_arrived(k);
  f.engine.release(3);
  pipeline.chunk_arrived(0);
  pipeline.chunk_arrived(1);
  REQUIRE(wait_until([&] { return pipeline.waiting_for_arrival() == 1; }, 10s, "layer 1 still waiting for chunk 2"));
  CHECK(layers_run == 0);
  pipeline.chunk_arrived(2);  // every chunk of layer 1 arrived; its uploads (events 4-6) are pending
  REQUIRE(wait_until([&] { return f.engine.waiters() == 1; }, 10s, "layer 1 waiting for its uploads"));
  CHECK(layers_run == 0);
  f.engine.release(2);
  REQUIRE(wait_until([&] { return f.engine.waiters() == 1; }, 10s, "layer 1 waiting for chunk 2's upload"));
  CHECK(layers_run == 0);
  f.engine.release(1);
  training.join();
  CHECK(layers_run == 2);
  CHECK(seen_at_forward == f.host_params);  // every layer ran on its new weights
  CHECK(f.engine.ordered_after() == std::vector<CopyEngine::Event>{6, 3});
  pipeline.finish_pull();  // everything arrived and uploaded: returns at once
}

TEST_CASE("copy pipeline: a pull whose wait returned releases the forward even without per-chunk arrivals") {
  Fixture f;
  CopyPipeline pipeline(f.map, f.engine, f.buffers());
  pipeline.begin_pull();
  pipeline.chunk_arrived(1);  // one reported, the others not (a reply path without the hook)
  std::atomic<bool> ran{false};
  std::thread training([&] {
    pipeline.before_forward(0, 39);
    ran = true;
  });
  REQUIRE(wait_until([&] { return pipeline.waiting_for_arrival() == 1; }, 10s, "the forward waiting"));
  pipeline.pull_complete();  // uploads for chunks 0, 2, 3, 4, 5 (chunk 1's is enqueued already)
  REQUIRE(wait_until([&] { return f.engine.waiters() == 1; }, 10s, "the forward waiting for the uploads"));
  CHECK_FALSE(ran);
  CHECK(f.engine.enqueued() == 6);
  f.engine.release(6);
  training.join();
  CHECK(ran);
  CHECK(f.device_params == f.host_params);
}

TEST_CASE("copy pipeline: replies outside a pipelined pull are not uploaded") {
  Fixture f;
  CopyPipeline pipeline(f.map, f.engine, f.buffers());
  pipeline.chunk_arrived(0);   // e.g. the initial weights' pull: the caller sets them itself
  pipeline.chunk_arrived(99);  // not a chunk
  CHECK(f.engine.enqueued() == 0);
  pipeline.before_forward(0, 39);  // nothing pending: no wait
  pipeline.begin_pull();
  pipeline.chunk_arrived(0);
  pipeline.chunk_arrived(0);  // a second reply for the same chunk (a resend): one upload
  CHECK(f.engine.enqueued() == 1);
}

TEST_CASE("copy pipeline: a failed communication job wakes a forward waiting for weights and rethrows") {
  Fixture f;
  CopyPipeline pipeline(f.map, f.engine, f.buffers());
  pipeline.begin_pull();
  std::string error;
  std::thread training([&] { error = pstrain::test::thrown_text([&] { pipeline.before_forward(0, 24); }); });
  REQUIRE(wait_until([&] { return pipeline.waiting_for_arrival() == 1; }, 10s, "the forward waiting"));
  pipeline.submit([] { throw pstrain::AbortedError("worker 0: the scheduler shut the job down"); });
  training.join();
  CHECK(error == "worker 0: the scheduler shut the job down");
  CHECK(pstrain::test::thrown_text([&] { pipeline.finish_pull(); }) == "worker 0: the scheduler shut the job down");
  CHECK(pstrain::test::thrown_text([&] { pipeline.wait_jobs(); }) == "worker 0: the scheduler shut the job down");
}

TEST_CASE("copy pipeline with a bfloat16 wire: the engine narrows each chunk; its push waits for that narrowing and copy") {
  Fixture f;
  for (std::size_t i = 0; i < f.device_grads.size(); ++i) f.device_grads[i] = 1.0f + 0.0137f * static_cast<float>(i);
  std::vector<std::uint16_t> wire_grads(39, 0), wire_params(39, 0);
  pstrain::PipelineBuffers buffers{{}, {}, f.device_grads.data(), f.device_params.data(), wire_grads, wire_params};
  CopyPipeline pipeline(f.map, f.engine, buffers);
  bool stale = false;
  std::vector<std::vector<std::int64_t>> pushes;
  auto push = [&](const std::vector<std::int64_t>& keys) {
    std::lock_guard lock(f.mutex);
    for (std::int64_t k : keys) {
      const pstrain::Chunk& c = f.map.chunk(k);
      for (std::int64_t i = c.offset; i < c.offset + c.num_elems; ++i) {
        const auto u = static_cast<std::size_t>(i);
        if (wire_grads[u] != pstrain::to_bfloat16(f.device_grads[u])) stale = true;
      }
    }
    pushes.push_back(keys);
  };
  pipeline.begin_step();
  pipeline.grads_ready(24, 15, push);  // layer 2: chunks 3, 4, 5, narrowed on the engine
  using D = CopyEngine::Direction;
  CHECK(f.engine.log() == std::vector<std::pair<D, std::int64_t>>{{D::kDownload, 3}, {D::kDownload, 4}, {D::kDownload, 5}});
  CHECK(f.engine.converted() == std::vector<bool>{true, true, true});
  CHECK(wire_grads[24] == 0);  // the calling thread converted nothing
  REQUIRE(wait_until([&] { return f.engine.waiters() == 1; }, 10s, "the push job waiting on chunk 3's narrowing"));
  {
    std::lock_guard lock(f.mutex);
    CHECK(pushes.empty());
  }
  f.engine.release(3);
  pipeline.wait_jobs();
  CHECK(pushes == std::vector<std::vector<std::int64_t>>{{3, 4, 5}});
  CHECK_FALSE(stale);

  // Weights in: the pulls land in wire_params as bfloat16; the forward of a
  // layer runs only once its chunks were widened into the model.
  for (std::size_t i = 0; i < wire_params.size(); ++i) wire_params[i] = pstrain::to_bfloat16(-3.0f - 0.011f * static_cast<float>(i));
  pipeline.begin_pull();
  std::vector<float> seen(24, 0.0f);
  std::atomic<bool> ran{false};
  std::thread training([&] {
    pipeline.before_forward(0, 24);
    std::copy(f.device_params.begin(), f.device_params.begin() + 24, seen.begin());
    ran = true;
  });
  for (std::int64_t k : {0, 1, 2}) pipeline.chunk_arrived(k);
  REQUIRE(wait_until([&] { return f.engine.waiters() == 1; }, 10s, "layer 1 waiting for its widening uploads"));
  CHECK_FALSE(ran);
  CHECK(f.engine.converted() == std::vector<bool>{true, true, true, true, true, true});
  f.engine.release(3);
  training.join();
  for (std::size_t i = 0; i < 24; ++i) CHECK(seen[i] == pstrain::from_bfloat16(wire_params[i]));
  CHECK(f.device_params[30] == -1.0f);  // layer 2's chunks have not arrived: not written
}

TEST_CASE("copy pipeline: pulls written straight into the model (no device weights) need no upload") {
  Fixture f;
  pstrain::PipelineBuffers buffers{f.host_grads, f.host_params, f.device_grads.data(), nullptr};
  CopyPipeline pipeline(f.map, f.engine, buffers);
  pipeline.begin_pull();
  std::atomic<bool> ran{false};
  std::thread training([&] {
    pipeline.before_forward(24, 15);  // layer 2
    ran = true;
  });
  REQUIRE(wait_until([&] { return pipeline.waiting_for_arrival() == 1; }, 10s, "layer 2 waiting for its chunks"));
  for (std::int64_t k : {0, 1, 2, 3, 4}) pipeline.chunk_arrived(k);
  REQUIRE(wait_until([&] { return pipeline.waiting_for_arrival() == 1; }, 10s, "layer 2 still waiting for chunk 5"));
  CHECK_FALSE(ran);
  pipeline.chunk_arrived(5);
  training.join();
  CHECK(ran);
  CHECK(f.engine.enqueued() == 0);  // nothing copied: the reply was the model's memory
}

TEST_CASE("copy pipeline: buffers that match the model in neither float32 nor bfloat16 are refused") {
  Fixture f;
  std::vector<std::uint16_t> short_wire(10);
  const std::string text = pstrain::test::thrown_text([&] {
    CopyPipeline p(f.map, f.engine, pstrain::PipelineBuffers{{}, {}, nullptr, nullptr, short_wire, short_wire});
  });
  CHECK(text == "copy pipeline: host buffers of 0 and 0 floats, bfloat16 buffers of 10 and 10 elements for a model "
                "of 39 (one pair must match it)");
}

TEST_CASE("host copy engine: narrowing and widening on the copy thread, bit for bit common/base/bfloat16.h") {
  pstrain::TraceRecorder trace(pstrain::TraceLevel::kAll);
  std::vector<float> values;
  for (int i = 0; i < 1000; ++i) values.push_back(0.37f * static_cast<float>(i) - 91.3f);
  for (std::uint32_t b : {0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0x7f800001u, 0xff800000u, 0x00000001u}) {
    values.push_back(std::bit_cast<float>(b));
  }
  const std::size_t n = values.size();
  std::vector<std::uint16_t> narrowed(n, 0xdeadu);
  std::vector<float> widened(n, 7.0f);
  {
    pstrain::HostCopyEngine engine(&trace);
    engine.prepare_bfloat16(n);
    const CopyEngine::Event e1 = engine.download_narrowed(narrowed.data(), values.data(), 3, n - 3, 4);
    const CopyEngine::Event e2 = engine.upload_widened(widened.data(), narrowed.data(), 3, n - 3, 4);
    engine.wait(e2);
    CHECK(engine.done(e1));
  }
  CHECK(narrowed[2] == 0xdeadu);  // outside [offset, offset + count): untouched
  CHECK(widened[2] == 7.0f);
  for (std::size_t i = 3; i < n; ++i) {
    CAPTURE(i);
    CHECK(narrowed[i] == pstrain::to_bfloat16(values[i]));
    CHECK(std::bit_cast<std::uint32_t>(widened[i]) == std::bit_cast<std::uint32_t>(pstrain::from_bfloat16(narrowed[i])));
  }
  const auto events = trace.events();
  REQUIRE(events.size() == 2);
  CHECK(events[0].tid == trace.track("copy stream"));
  CHECK(std::string(events[0].name) == "download");
  CHECK(std::string(events[1].name) == "upload");
}

TEST_CASE("host copy engine: copies in order, events complete in order, spans on the copy stream's track") {
  pstrain::TraceRecorder trace(pstrain::TraceLevel::kAll);
  std::vector<float> a(1000, 1.5f), b(1000, 0.0f), c(1000, 0.0f);
  CopyEngine::Event e1 = 0, e2 = 0;
  {
    pstrain::HostCopyEngine engine(&trace);
    e1 = engine.download(b.data(), a.data(), a.size() * sizeof(float), 7);
    e2 = engine.upload(c.data(), b.data(), b.size() * sizeof(float), 8);  // reads what the first wrote
    CHECK(e1 == 1);
    CHECK(e2 == 2);
    engine.wait(e2);
    CHECK(engine.done(e1));
    CHECK(engine.done(0));
    CHECK(c == a);
  }
  const auto events = trace.events();
  std::vector<std::string> names;
  for (const auto& e : events) {
    CHECK(e.tid == trace.track("copy stream"));
    names.emplace_back(e.name);
  }
  CHECK(names == std::vector<std::string>{"download", "upload"});
}
