#!/usr/bin/env bash
# The figures and an HTML page of one run, in RUN_DIR/report/ (index.html,
# summary.md, PNGs): accuracy and loss curves, per-worker time split,
# staleness, resource use and a typical step's timeline. Debian's Python
# (it has matplotlib):
#   tools/report.sh RUN_DIR [--output DIR]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export MPLCONFIGDIR="${MPLCONFIGDIR:-${TMPDIR:-/tmp}/pstrain-mpl-$(id -u)}"
PYTHONPATH="$root/tools${PYTHONPATH:+:$PYTHONPATH}" exec /usr/bin/python3 -m experiment.run_report "$@"
