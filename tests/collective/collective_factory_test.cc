// Choosing the collective backend and its errors; the GPU assignment of
// allreduce workers.
#include <doctest/doctest.h>

#include <cstdlib>

#include "collective_test_util.h"
#include "common/base/errors.h"
#include "worker/collective/gpu_assignment.h"
#include "tests/support/skip.h"

namespace pstrain {

TEST_CASE("auto picks Gloo for a model on the CPU; nccl there is refused with the reason") {
  CHECK(gloo_compiled_in());  // CI builds with libgloo-dev
  CHECK(resolve_collective_backend("auto", false, "cpu (oneDNN, 1 threads)") == "gloo");
  CHECK(resolve_collective_backend("gloo", false, "cpu") == "gloo");
  CHECK(resolve_collective_backend("gloo", true, "cuda:0") == "gloo");
  CHECK(resolve_collective_backend("auto", true, "cuda:0") == (nccl_compiled_in() ? "nccl" : "gloo"));
  const std::string err = testing::thrown_text([] { resolve_collective_backend("nccl", false, "cpu (oneDNN, 2 threads)"); });
  if (nccl_compiled_in()) {
    CHECK(err == "collective.backend \"nccl\": NCCL reduces GPU memory, but this worker's model runs on cpu (oneDNN, "
                 "2 threads) (no usable CUDA device); use \"gloo\" or \"auto\"");
  } else {
    CHECK(err.find("collective.backend \"nccl\": pstrain was built without NCCL") == 0);
  }
  CHECK_THROWS_WITH_AS(resolve_collective_backend("mpi", false, "cpu"),
                       "collective.backend \"mpi\": unknown, expected \"auto\", \"gloo\" or \"nccl\"", ConfigError);
}

TEST_CASE("make_collective checks rank, size, timeout and the backend's name") {
  InProcessStore store;
  CHECK_THROWS_WITH_AS(make_collective("gloo", testing::rank_options(2, 2), store),
                       "collective: rank 2 of 2 ranks: expected size >= 1 and 0 <= rank < size", ConfigError);
  CHECK_THROWS_WITH_AS(make_collective("gloo", testing::rank_options(0, 0), store),
                       "collective: rank 0 of 0 ranks: expected size >= 1 and 0 <= rank < size", ConfigError);
  CHECK_THROWS_WITH_AS(make_collective("gloo", testing::rank_options(0, 1, 0), store),
                       "collective: timeout of 0 ms, expected >= 1", ConfigError);
  const std::string err = testing::thrown_text([&] { make_collective("mpi", testing::rank_options(0, 1), store); });
  CHECK(err.find("collective backend 'mpi': not available in this build") == 0);
}

#if defined(PSTRAIN_HAVE_NCCL)
// Its own CTest entry (collective_nccl_no_gpu), skipped where a GPU is present.
TEST_CASE("nccl without a GPU fails with a clear error, not a crash") {
  if (visible_cuda_devices() > 0) {
    return pstrain::test::skip_case("a CUDA device is present: the no-GPU error path is not exercised here");
  }
  InProcessStore store;
  const std::string err = testing::thrown_text([&] { make_collective("nccl", testing::rank_options(0, 1), store); });
  CHECK(err.find("nccl setup (rank 0 of 1, cuda:0): no CUDA device") == 0);
}
#endif

TEST_CASE("one GPU per worker by local rank") {
  CHECK(worker_device("cpu", 3, 8) == "cpu");
  CHECK(worker_device("cuda:5", 3, 8) == "cuda:5");
  CHECK(worker_device("auto", 3, 8) == "cuda:3");
  CHECK(worker_device("auto", 9, 8) == "cuda:1");
  CHECK(worker_device("auto", -1, 2) == "cuda:0");
  CHECK(worker_device("auto", 3, 0) == "auto");
  CHECK(worker_device("cuda", 2, 4) == "cuda:2");
  CHECK(worker_device("cuda", 2, 0) == "cuda:2");  // the CUDA backend then says there is no device
}

TEST_CASE("the local rank comes from the launcher's environment") {
  const char* names[] = {"LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"};
  for (const char* n : names) unsetenv(n);
  CHECK(local_rank_from_env() == -1);
  setenv("SLURM_LOCALID", "3", 1);
  CHECK(local_rank_from_env() == 3);
  setenv("LOCAL_RANK", "1", 1);
  CHECK(local_rank_from_env() == 1);  // torchrun's wins
  setenv("LOCAL_RANK", "one", 1);
  CHECK_THROWS_WITH_AS(local_rank_from_env(), "environment LOCAL_RANK='one': expected a local rank >= 0", ConfigError);
  setenv("LOCAL_RANK", "-2", 1);
  CHECK_THROWS_WITH_AS(local_rank_from_env(), "environment LOCAL_RANK='-2': expected a local rank >= 0", ConfigError);
  for (const char* n : names) unsetenv(n);
}

}  // namespace pstrain
