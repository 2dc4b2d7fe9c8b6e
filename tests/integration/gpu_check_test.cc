// Whether this host has GPUs, read without CUDA (common/observe/gpu_presence.h),
// and the launcher's check of a job's GPU needs (tools/launcher/gpu_check.h),
// on device folders made here: the real /dev of this machine has no GPU.
#include <doctest/doctest.h>

#include "common/observe/gpu_presence.h"
#include "tests/integration/launch_test_util.h"
#include "tools/launcher/gpu_check.h"

using pstrain::GpuPresence;
using pstrain::probe_gpu_presence;
using pstrain::launcher::check_gpus;

namespace {

// A fake /dev holding the named files, and an empty /proc/driver/nvidia.
struct FakeHost {
  it::TempDir dir;
  it::fs::path dev = dir.path() / "dev";
  it::fs::path proc = dir.path() / "proc-nvidia";
  explicit FakeHost(std::initializer_list<const char*> files) {
    it::fs::create_directories(dev);
    for (const char* f : files) it::write_file(dev / f, "");
  }
  GpuPresence probe(const char* visible = nullptr) const { return probe_gpu_presence(dev, proc, visible); }
};

pstrain::RunConfig allreduce(int workers, const std::string& backend = "auto", const std::string& device = "auto") {
  pstrain::RunConfig c;
  c.mode = pstrain::Mode::kAllreduce;
  c.cluster.num_workers = workers;
  c.collective.backend = backend;
  c.workload.device = device;
  return c;
}

}  // namespace

TEST_CASE("probe_gpu_presence: the driver's files, /dev/nvidia<N>, and CUDA_VISIBLE_DEVICES") {
  const FakeHost none({"null", "nvidia-uvm"});
  const GpuPresence n = none.probe();
  CHECK_FALSE(n.driver);
  CHECK(n.visible_devices == 0);
  CHECK(it::contains(n.detail, "no NVIDIA driver: none of "));

  const FakeHost two({"nvidiactl", "nvidia0", "nvidia1", "nvidia-uvm", "nvidia-modeset", "nvidia-caps"});
  CHECK(two.probe().driver);
  CHECK(two.probe().visible_devices == 2);  // nvidia-uvm and friends are not GPUs
  CHECK(two.probe("0").visible_devices == 1);
  CHECK(two.probe("1,0").visible_devices == 2);
  CHECK(two.probe("GPU-1a2b,GPU-3c4d,GPU-5e6f").visible_devices == 2);  // at most what is present
  CHECK(two.probe("1,-1,0").visible_devices == 1);  // CUDA stops at the first invalid entry
  CHECK(two.probe("").visible_devices == 0);
  CHECK(it::contains(two.probe("0").detail, "CUDA_VISIBLE_DEVICES=0"));

  const FakeHost wsl({"dxg"});
  CHECK(wsl.probe().driver);
  CHECK(wsl.probe().visible_devices == -1);  // one device file for every GPU: unknown
  CHECK(wsl.probe("0,1").visible_devices == 2);

  const FakeHost driver_only({});
  it::write_file(driver_only.proc / "version", "NVRM version: ...\n");
  CHECK(driver_only.probe().driver);
  CHECK(driver_only.probe().visible_devices == 0);
}

TEST_CASE("check_gpus: NCCL needs a GPU per worker on this host; cuda and nccl need a GPU at all") {
  const GpuPresence one{true, 1, "1 /dev/nvidia<N> file(s)"};
  const GpuPresence none{false, 0, "no NVIDIA driver: none of ..."};

  auto c = check_gpus(allreduce(2), 2, one, true);  // auto picks NCCL for GPU workers
  CHECK(c.key == "cluster.workers");
  CHECK(it::contains(c.problem, "2 allreduce workers on this machine over NCCL, but 1 GPU(s) visible"));
  CHECK(it::contains(c.problem, "use cluster.workers <= 1, collective.backend = \"gloo\""));
  CHECK(check_gpus(allreduce(2, "nccl"), 2, one, true).key == "cluster.workers");
  CHECK(check_gpus(allreduce(2, "nccl"), 2, one, false).key == "cluster.workers");  // the worker refuses it anyway
  CHECK(check_gpus(allreduce(2), 2, one, false).problem.empty());  // no NCCL built: auto is Gloo
  CHECK(check_gpus(allreduce(2, "gloo"), 2, one, true).problem.empty());
  CHECK(check_gpus(allreduce(1), 1, one, true).problem.empty());
  CHECK(check_gpus(allreduce(4), 1, one, true).problem.empty());  // three of them on other hosts
  CHECK(check_gpus(allreduce(2, "auto", "cpu"), 2, one, true).problem.empty());
  CHECK(check_gpus(allreduce(2), 2, GpuPresence{true, -1, "wsl"}, true).problem.empty());  // unknown: not refused
  pstrain::RunConfig sync = allreduce(2);
  sync.mode = pstrain::Mode::kSync;  // PS workers may share a GPU
  CHECK(check_gpus(sync, 2, one, true).problem.empty());

  const auto cuda = check_gpus(allreduce(2, "gloo", "cuda:1"), 2, none, true);
  CHECK(cuda.key == "workload.device");
  CHECK(it::contains(cuda.problem, "\"cuda:1\" but this machine has no usable GPU"));
  const auto nccl = check_gpus(allreduce(2, "nccl"), 2, none, true);
  CHECK(nccl.key == "collective.backend");
  const auto quiet = check_gpus(allreduce(2), 2, none, true);
  CHECK(quiet.problem.empty());
  CHECK(it::contains(quiet.note, "workload.device = \"auto\": this machine has no NVIDIA driver, so its 2 worker(s) "
                                 "train on the CPU"));
  CHECK(check_gpus(allreduce(2, "auto", "cpu"), 2, none, true).note.empty());
  CHECK(check_gpus(allreduce(2, "nccl", "cuda"), 0, none, true).problem.empty());  // no worker here
}
