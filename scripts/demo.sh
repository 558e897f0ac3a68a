#!/usr/bin/env bash
# The main job on its embedded default: set up, build, trace the bundled demo training loop,
# write a recording and a Perfetto trace, and print the report. Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
mkdir -p demo-output
build/eacgm record --force -o demo-output/demo.eacgm.db --perfetto demo-output/demo.pftrace \
  -- build/demo_train "${1:-200}"
echo
build/eacgm report demo-output/demo.eacgm.db
