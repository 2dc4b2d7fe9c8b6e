// A worker refuses a batch larger than its shard (issue 15: a batch of 4096 on
// a 512-sample shard was silently cut to one step an epoch), for processes
// started without the launcher's own check (by hand, SLURM, mpirun).
#include <doctest/doctest.h>

#include "common/config/config.h"
#include "common/base/errors.h"
#include "worker/data/synthetic.h"
#include "worker/train/epoch_driver.h"

TEST_CASE("EpochDriver refuses a batch larger than the worker's shard and names the numbers") {
  const pstrain::data::Dataset train = pstrain::data::make_synthetic(1024, 1);
  pstrain::RunConfig config;
  config.workload.batch_size = 513;  // 1024 / 2 workers = 512 per worker
  CHECK_THROWS_WITH_AS(pstrain::EpochDriver(config, train, 0, 2),
                       "workload.batch_size 513 is larger than a worker's shard: 1024 training samples / 2 workers "
                       "= 512 per worker; use workload.batch_size <= 512 or fewer workers",
                       pstrain::ConfigError);
  config.workload.batch_size = 512;
  const pstrain::EpochDriver fits(config, train, 1, 2);
  CHECK(fits.steps_per_epoch() == 1);
  config.workload.batch_size = 513;
  CHECK_NOTHROW(pstrain::EpochDriver(config, train, 0, 1));  // one worker: the whole set
}
