// weights.npz: worker 0's final weights by tensor name and shape, read with
// NumPy (python3-numpy from Debian, which matplotlib already needs) and
// compared value for value with weights.bin of the same run. Debian's
// Python on purpose: the tools under test are meant for it.
#include <doctest/doctest.h>

#include <cstdio>

#include "tests/integration/launch_test_util.h"

namespace {

// Runs a command and returns its standard output and exit status.
std::pair<std::string, int> capture(const std::string& command) {
  std::FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string out;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) out.append(buf, n);
  const int status = pclose(pipe);
  return {out, WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

// Loads both files; prints one "name shape" line per tensor, then "equal"
// if the npz's tensors, concatenated in archive order, are weights.bin.
constexpr const char* kCheck = R"PY(
import struct, sys
import numpy as np
run = sys.argv[1]
with np.load(run + "/weights.npz") as npz:
    tensors = [(name, npz[name]) for name in npz.files]
with open(run + "/weights.bin", "rb") as f:
    raw = f.read()
assert raw[:4] == b"PSWT", raw[:4]
(count,) = struct.unpack("<Q", raw[8:16])
flat = np.frombuffer(raw[16:], dtype="<f4")
assert flat.size == count
for name, t in tensors:
    assert t.dtype == np.float32, t.dtype
    print(name, tuple(t.shape))
joined = np.concatenate([t.ravel() for _, t in tensors])
print("equal" if joined.size == flat.size and np.array_equal(joined, flat) else "DIFFERENT")
)PY";

}  // namespace

TEST_CASE("a run's weights.npz loads with numpy, by name and shape, and equals weights.bin") {
  it::TempDir dir;
  const auto run = dir.path() / "sync";
  auto args = it::launch_args(it::kSourceDir / "configs/tiny_sync.toml", run);
  args.insert(args.end(), {"--set", "workload.max_steps=3"});
  const it::Result r = it::run_launch(args, dir.path());
  INFO(r.output);
  REQUIRE(r.exit.code == 0);
  REQUIRE(it::fs::exists(run / "weights.npz"));
  CHECK_FALSE(it::fs::exists(run / "weights.npz.tmp"));

  const auto script = dir.path() / "check.py";
  it::write_file(script, kCheck);
  const auto [out, status] = capture("/usr/bin/python3 " + script.string() + " " + run.string() + " 2>&1");
  INFO(out);
  REQUIRE(status == 0);
  // small_cnn (configs/tiny_sync.toml): two convolutions and a linear layer.
  CHECK(it::contains(out, "conv1.weight (8, "));
  CHECK(it::contains(out, "conv1.bias (8,)\n"));
  CHECK(it::contains(out, "conv2.weight (16, 8, 3, 3)\n"));
  CHECK(it::contains(out, "fc1.bias ("));
  CHECK(it::contains(out, "\nequal\n"));
}
