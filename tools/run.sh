#!/usr/bin/env bash
# The main job: installs what is missing, builds, then runs a config (default:
# configs/default.toml) with the launcher: scheduler, servers and workers as
# processes on this machine. Prints the summary and where the results are.
#   tools/run.sh [CONFIG] [launch options, e.g. --set workload.epochs=2]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/tools/build.sh"
config="${1:-$root/configs/default.toml}"
shift || true
build="${PSTRAIN_BUILD_DIR:-$root/build}"
cd "$root"
exec "$build/bin/launch" --config "$config" "$@"
