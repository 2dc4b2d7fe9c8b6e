#!/usr/bin/env bash
# Starts the right pstrain program for this task of a SLURM or MPI job:
# global rank 0 is the scheduler, 1..S the servers, S+1..S+W the workers
# (S = 0 in allreduce mode). The programs read their rank from the same
# environment variables (SLURM_PROCID, OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK).
#   srun --ntasks=$((1+S+W)) tools/pstrain-node.sh CONFIG [--set key=value ...]
set -euo pipefail
config="${1:?usage: pstrain-node.sh CONFIG [--set key=value ...]}"
shift
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${PSTRAIN_BIN_DIR:-$root/build/bin}"
rank="${SLURM_PROCID:-${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${PMIX_RANK:-}}}}"
if [ -z "$rank" ]; then
  echo "pstrain-node.sh: no launcher rank (SLURM_PROCID, OMPI_COMM_WORLD_RANK, PMI_RANK or PMIX_RANK)" >&2
  exit 3
fi
# Read the server count and mode the same way the programs will (overrides included).
servers=$("$bin/pstrain-server" --config "$config" "$@" --print-servers)
if [ "$rank" -eq 0 ]; then
  exec "$bin/pstrain-scheduler" --config "$config" "$@"
elif [ "$rank" -le "$servers" ]; then
  exec "$bin/pstrain-server" --config "$config" "$@"
else
  exec "$bin/pstrain-worker" --config "$config" "$@"
fi
