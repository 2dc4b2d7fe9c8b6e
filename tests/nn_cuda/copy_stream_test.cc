// The CUDA copy engine (worker/nn/cuda/copy_stream.h) on a real device:
// copies ordered after the training stream's queued kernels, events, the
// training stream ordered after an upload, spans on the "copy stream" track.
// Skipped, with the reason printed, when no CUDA device is present.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "common/observe/trace.h"
#include "parity_harness.h"
#if defined(PSTRAIN_HAVE_CUDA)
#include "worker/nn/cuda/copy_stream.h"
#endif

namespace pstrain::nn::parity {
namespace {

TEST_CASE("cuda copy stream: downloads after the queued kernels, uploads before the ordered ones, events in order") {
  auto b = backends_or_skip();
  if (!b) return;
#if defined(PSTRAIN_HAVE_CUDA)
  const std::size_t n = (std::size_t{1} << 20) + 3;
  TraceRecorder trace(TraceLevel::kAll);
  std::vector<float> host(n, 0.0f), weights = random_floats(n, 5);
  Buffer grads = Buffer::from(*b->cuda, std::vector<float>(n, 1.0f));
  Buffer params(*b->cuda, n * sizeof(float)), copy(*b->cuda, n * sizeof(float));
  {
    auto engine = cuda::make_cuda_copy_engine(*b->cuda, &trace);
    engine->register_host(host.data(), n * sizeof(float));
    engine->register_host(weights.data(), n * sizeof(float));
    // A kernel queued on the training stream, not synchronized: the download sees its result.
    b->cuda->fill(grads.f32(), 7.0f, n);
    const CopyEngine::Event down = engine->download(host.data(), grads.f32(), n * sizeof(float), 3);
    engine->wait(down);
    CHECK(engine->done(down));
    CHECK(host == std::vector<float>(n, 7.0f));
    // An upload, then a device copy on the training stream ordered after it (the host does not wait).
    const CopyEngine::Event up = engine->upload(params.f32(), weights.data(), n * sizeof(float), 4);
    CHECK(up == down + 1);
    engine->order_compute_after(up);
    b->cuda->copy(copy.f32(), params.f32(), n * sizeof(float));
    CHECK(copy.to_host<float>() == weights);
    CHECK(engine->done(up));
  }
  std::vector<std::string> names;
  for (const TraceEvent& e : trace.events()) {
    CHECK(e.tid == trace.track("copy stream"));
    names.emplace_back(e.name);
  }
  CHECK(names == std::vector<std::string>{"download", "upload"});
#endif
}

TEST_CASE("cuda copy stream: refused on the CPU backend") {
  auto b = backends_or_skip();
  if (!b) return;
#if defined(PSTRAIN_HAVE_CUDA)
  std::string error;
  try {
    cuda::make_cuda_copy_engine(*b->cpu, nullptr);
  } catch (const std::exception& e) {
    error = e.what();
  }
  CHECK(error.find("is not CUDA") != std::string::npos);
#endif
}

}  // namespace
}  // namespace pstrain::nn::parity
