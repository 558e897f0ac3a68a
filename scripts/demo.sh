#!/usr/bin/env bash
# The main job on its embedded default: set up, build, then scripts/demo_run.sh: trace a 2-rank
# GPT-style PyTorch training (a straggling rank, then a noisy neighbour) and the bundled CUDA
# loop with plain `eacgm record`, find the anomalies with plain `eacgm detect`, and write the
# recordings, a Perfetto trace and the report to demo-output/. Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
exec scripts/demo_run.sh demo-output "$@"
