#!/usr/bin/env bash
# Configures and builds eacgm, its tests and the demo workload into build/.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEACGM_WERROR=ON >/dev/null
cmake --build build -j"$(nproc)"
