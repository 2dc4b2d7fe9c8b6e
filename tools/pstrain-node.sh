#!/usr/bin/env bash
# Starts the right pstrain program for this task of a SLURM or MPI job:
# global rank 0 is the scheduler, 1..S the servers, S+1..S+W the workers
# (S = 0 in allreduce mode). The rank comes from the launcher's environment,
# the first set of RANK (torchrun style), OMPI_COMM_WORLD_RANK, PMIX_RANK,
# PMI_RANK, SLURM_PROCID -- the same variables, in the same order, that the
# programs read (common/node/node_cli.h); MASTER_ADDR/MASTER_PORT, if set, name
# the scheduler and WORLD_SIZE, if set, must be 1+S+W. The run directory
# gets what `launch` writes: config.toml (the scheduler), logs/ (this
# script), metrics/, weights and, from rank 0 once the job ends well,
# summary.json and summary.md (pstrain-summary), and trace.json (merge_trace). It needs a file system
# every host shares, as the metrics already do.
#   srun --ntasks=$((1+S+W)) tools/pstrain-node.sh CONFIG [--set key=value ...]
#   RANK=0 WORLD_SIZE=5 MASTER_ADDR=node1 MASTER_PORT=29500 tools/pstrain-node.sh CONFIG
set -euo pipefail
config="${1:?usage: pstrain-node.sh CONFIG [--set key=value ...]}"
shift
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${PSTRAIN_BIN_DIR:-$root/build/bin}"
rank="${RANK-${OMPI_COMM_WORLD_RANK-${PMIX_RANK-${PMI_RANK-${SLURM_PROCID-}}}}}"
if [ -z "$rank" ]; then
  echo "pstrain-node.sh: no launcher rank (RANK, OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK or SLURM_PROCID)" >&2
  exit 3
fi
case "$rank" in
  *[!0-9]*)
    echo "pstrain-node.sh: launcher rank '$rank' is not a non-negative integer" >&2
    exit 3 ;;
esac
# Read the server count, mode and run directory the same way the programs will (overrides included).
servers=$("$bin/pstrain-server" --config "$config" "$@" --print-servers)
run_dir=$("$bin/pstrain-server" --config "$config" "$@" --print-run-dir)
# Each process's output also goes to RUN_DIR/logs/<role>[-<rank>].log, the names `launch` uses.
if [ "$rank" -eq 0 ]; then
  log=scheduler.log
elif [ "$rank" -le "$servers" ]; then
  log="server-$((rank - 1)).log"
else
  log="worker-$((rank - 1 - servers)).log"
fi
if [ -n "$run_dir" ]; then
  mkdir -p "$run_dir/logs"
  exec > >(tee -a "$run_dir/logs/$log") 2>&1
fi
if [ "$rank" -eq 0 ]; then
  # The scheduler writes config.toml (not started by launch); once the job
  # ended well, rank 0 writes the summary from every worker's metrics.
  status=0
  "$bin/pstrain-scheduler" --config "$config" "$@" || status=$?
  if [ "$status" -eq 0 ] && [ -n "$run_dir" ]; then
    # Each server writes metrics/server-R.json as it exits, just after the
    # scheduler: wait (at most 30 s) for all of them before summing up.
    for _ in $(seq 300); do
      missing=0
      for ((r = 0; r < servers; r++)); do [ -e "$run_dir/metrics/server-$r.json" ] || missing=1; done
      [ "$missing" -eq 0 ] && break
      sleep 0.1
    done
    "$bin/pstrain-summary" "$run_dir" || status=$?
  fi
  # The job's timeline, as launch merges it (also after a failure): each
  # process writes trace/<role>-<rank>.json as it exits, the others just after
  # the scheduler; wait (at most 30 s) for one part per task when the task
  # count is known, then merge what is there.
  if [ -n "$run_dir" ] && [ -d "$run_dir/trace" ]; then
    tasks="${WORLD_SIZE-${OMPI_COMM_WORLD_SIZE-${PMI_SIZE-${SLURM_NTASKS-}}}}"
    for _ in $(seq 300); do
      parts=$(find "$run_dir/trace" -maxdepth 1 -name '*.json' | wc -l)
      if [ -n "$tasks" ] && [ "$parts" -ge "$tasks" ]; then break; fi
      sleep 0.1
    done
    "$bin/merge_trace" "$run_dir" || true
  fi
  exit "$status"
elif [ "$rank" -le "$servers" ]; then
  exec "$bin/pstrain-server" --config "$config" "$@"
else
  exec "$bin/pstrain-worker" --config "$config" "$@"
fi
