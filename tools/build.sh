#!/usr/bin/env bash
# Installs missing dependencies, then configures and builds pstrain in build/.
# Extra arguments go to the CMake configure step (e.g. -DPSTRAIN_CUDA=OFF).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/tools/install_deps.sh"
build="${PSTRAIN_BUILD_DIR:-$root/build}"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$build" -j "$(nproc)"
