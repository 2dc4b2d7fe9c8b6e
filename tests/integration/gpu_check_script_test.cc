// tools/gpu_check.sh (the one command that checks everything GPU-related)
// and bench_train_step --device cuda (its GPU step benchmark) on a machine
// without a GPU: each says so and exits 77 (CTest's skip code) without
// measuring anything or writing its output; where nvidia-smi names a GPU but
// the build lacks a program, the script names the missing one (exit 2). Their
// own CTest entry (integration_no_gpu), skipped where a GPU is present: there
// the script runs the whole check.
#include <doctest/doctest.h>

#include "common/observe/gpu_presence.h"
#include "tests/integration/launch_test_util.h"
#include "tests/support/skip.h"

namespace {

const it::fs::path kScript = it::kSourceDir / "tools/gpu_check.sh";

// Runs `argv` to its end; its exit and output.
it::Result run(const it::TempDir& dir, std::vector<std::string> argv) {
  pstrain::test::Command c{std::move(argv), {}, {"PSTRAIN_ROOT", "PSTRAIN_BUILD_DIR", "PYTHON"}};
  pstrain::test::ChildProcess p(c, dir.path() / "script-output.txt");
  const auto exit = p.wait(std::chrono::seconds(60));
  if (!exit) throw std::runtime_error("did not exit within 60 s; output:\n" + p.output());
  return it::Result{*exit, p.output()};
}

}  // namespace

TEST_CASE("tools/gpu_check.sh on a machine without a GPU: says so and exits 77, nothing run") {
  if (pstrain::probe_gpu_presence().driver) {
    return pstrain::test::skip_case("a GPU is present: tools/gpu_check.sh runs the whole check there");
  }
  it::TempDir dir;
  const it::Result syntax = run(dir, {"/bin/bash", "-n", kScript.string()});
  INFO(syntax.output);
  CHECK(syntax.exit.code == 0);

  const auto out = dir.path() / "out";
  const it::Result r = run(dir, {"/bin/bash", kScript.string(), out.string()});
  INFO(r.output);
  CHECK_FALSE(r.exit.signaled);
  CHECK(r.exit.code == 77);
  CHECK(it::contains(r.output, "gpu_check: no GPU on this machine (nvidia-smi lists none, no /dev/nvidia0 with a "
                               "driver): nothing checked"));
  CHECK_FALSE(it::contains(r.output, "== parity"));
  CHECK_FALSE(it::fs::exists(out));

  // nvidia-smi names a GPU (a stand-in), but the build folder has no programs: refused, naming one.
  const auto fake_bin = dir.path() / "fake-bin";
  it::fs::create_directories(fake_bin);
  it::write_file(fake_bin / "nvidia-smi", "#!/bin/sh\necho 'NVIDIA Stand-in GPU'\n", true);
  const auto empty_build = dir.path() / "empty-build";
  it::fs::create_directories(empty_build / "bin");
  pstrain::test::Command c{{"/bin/bash", kScript.string(), out.string()},
                           {{"PATH", fake_bin.string() + ":/usr/bin:/bin"},
                            {"PSTRAIN_BUILD_DIR", empty_build.string()}},
                           {"PSTRAIN_ROOT", "PYTHON"}};
  pstrain::test::ChildProcess p(c, dir.path() / "refused-output.txt");
  const auto refused = p.wait(std::chrono::seconds(60));
  INFO(p.output());
  REQUIRE(refused);
  CHECK(refused->code == 2);
  CHECK(it::contains(p.output(), "gpu_check: " + (empty_build / "bin/test_nn_cuda").string() +
                                     " is missing: build it first"));
  CHECK_FALSE(it::fs::exists(out));
}

// The same entry: the GPU benchmark behind the script refuses alike; the CPU one is unchanged.
TEST_CASE("bench_train_step --device cuda on a machine without a GPU: says so and exits 77") {
  if (pstrain::probe_gpu_presence().driver) {
    return pstrain::test::skip_case("a GPU is present: bench_train_step --device cuda measures there");
  }
  it::TempDir dir;
  const auto json = dir.path() / "bench.json";
  const it::Result r = run(dir, {(it::kBinDir / "bench_train_step").string(), "--device", "cuda", "--precision", "tf32",
                                 "--json", json.string()});
  INFO(r.output);
  CHECK(r.exit.code == 77);
  // A CUDA build without a device, or a build without CUDA (CI's fresh root): each says which.
  CHECK((it::contains(r.output, "bench_train_step: --device cuda: no CUDA device: ") ||
         it::contains(r.output, "bench_train_step: --device cuda: pstrain was built without CUDA")));
  CHECK(it::contains(r.output, "; nothing measured"));
  CHECK_FALSE(it::fs::exists(json));
  const it::Result bad = run(dir, {(it::kBinDir / "bench_train_step").string(), "--device", "cuda", "--precision", "bf16"});
  CHECK(bad.exit.code != 0);
  CHECK(bad.exit.code != 77);
  CHECK(it::contains(bad.output, "--precision: bf16 not in {fp32,tf32}"));
}
