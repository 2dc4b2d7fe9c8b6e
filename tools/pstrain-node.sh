#!/usr/bin/env bash
# Starts the right pstrain program for this task of a SLURM or MPI job:
# global rank 0 is the scheduler, 1..S the servers, S+1..S+W the workers
# (S = 0 in allreduce mode). The rank comes from the launcher's environment,
# the first set of RANK (torchrun style), OMPI_COMM_WORLD_RANK, PMIX_RANK,
# PMI_RANK, SLURM_PROCID -- the same variables, in the same order, that the
# programs read (common/node_cli.h); MASTER_ADDR/MASTER_PORT, if set, name
# the scheduler and WORLD_SIZE, if set, must be 1+S+W.
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
# Read the server count and mode the same way the programs will (overrides included).
servers=$("$bin/pstrain-server" --config "$config" "$@" --print-servers)
if [ "$rank" -eq 0 ]; then
  exec "$bin/pstrain-scheduler" --config "$config" "$@"
elif [ "$rank" -le "$servers" ]; then
  exec "$bin/pstrain-server" --config "$config" "$@"
else
  exec "$bin/pstrain-worker" --config "$config" "$@"
fi
