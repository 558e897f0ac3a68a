#!/usr/bin/env bash
# The main job on its embedded default: set up, build, trace the bundled demo training loop
# (beside a noisy neighbour for a while), write a recording, find the anomalies, write a
# Perfetto trace, and print the report. Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
mkdir -p demo-output
db=demo-output/demo.eacgm.db
# 4,000 steps on CPU 0 (about 9 s). From 6 s to 7.5 s two other processes, not traced, keep
# CPU 0 busy: a noisy neighbour, the fault eacgm detect should find.
( sleep 6; for _ in 1 2; do taskset -c 0 timeout 1.5 sh -c 'while :; do :; done' & done; wait ) \
  >/dev/null 2>&1 &
neighbour=$!
build/eacgm record --force -o "$db" --layers cuda,host --interval 20 \
  -- build/demo_train "${1:-4000}" 0
wait "$neighbour"
echo
# Learn normal from the first half, flag what is not (windows of 0.1 s across layers).
build/eacgm detect "$db" --window 0.1
echo
build/eacgm export "$db" --perfetto demo-output/demo.pftrace --force
build/eacgm report "$db"
echo
echo "demo: recording $db, Perfetto trace demo-output/demo.pftrace (open in ui.perfetto.dev)"
