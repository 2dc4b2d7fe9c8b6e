#!/usr/bin/env bash
# Runs tools/experiment.py with Debian's Python (it has matplotlib) and the
# build's programs:
#   tools/experiment.sh configs/experiments/modes.toml [--output DIR] [--report-only] [--list]
# The build directory is $PSTRAIN_BUILD_DIR, else build/ of the repository.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${PSTRAIN_BUILD_DIR:-$root/build}"
exec /usr/bin/python3 "$root/tools/experiment.py" --bin-dir "$build/bin" "$@"
