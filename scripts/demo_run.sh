#!/usr/bin/env bash
# The demo itself, once eacgm is built (scripts/demo.sh sets up and builds first):
#   scripts/demo_run.sh [OUT_DIR] [SECONDS]
# Traces a 2-rank GPT-style training (examples/gpt_ddp.py: PyTorch, Gloo, CPU) with a plain
# `eacgm record`, while rank 1 straggles for a while and then a noisy neighbour takes the CPUs;
# then a plain `eacgm detect` names both, and the recording, a Perfetto trace, the report and
# its page of charts (report --html) are written to OUT_DIR (default demo-output). About a
# minute. Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-demo-output}
seconds=${2:-24}
EACGM=${EACGM:-build/eacgm}
PYTHON=${PYTHON:-/usr/bin/python3}  # Debian's, with python3-torch
DEMO_TRAIN=${DEMO_TRAIN:-build/demo_train}  # the bundled CUDA loop (built where nvcc is)
[ -x "$EACGM" ] || { echo "demo: $EACGM is missing: run scripts/build.sh first" >&2; exit 1; }
"$PYTHON" -c 'import torch' 2>/dev/null ||
  { echo "demo: $PYTHON cannot import torch: scripts/setup.sh installs python3-torch" >&2; exit 1; }
mkdir -p "$out"
db=$out/demo.eacgm.db
signal=$out/.neighbour-now
rm -f "$signal"

# The noisy neighbour: when rank 0 says (80% into training), three busy processes that eacgm
# does not trace take most of both CPUs for 3 s.
(
  while [ ! -e "$signal" ]; do sleep 0.05; done
  for _ in 1 2 3; do timeout 3 sh -c 'while :; do :; done' & done
  wait
) >/dev/null 2>&1 &
neighbour=$!
cuda_neighbour=""
# on any exit, no neighbour stays behind (timeout passes the signal on to its loop)
stop_neighbours() {
  for p in $neighbour $cuda_neighbour; do
    pkill -P "$p" 2>/dev/null || true
    kill "$p" 2>/dev/null || true
  done
  rm -f "$signal" "$out/.cuda-neighbour-now"
}
trap stop_neighbours EXIT

echo "demo: tracing a 2-rank GPT training for ${seconds} s (rank 1 straggles at 62-76%, a noisy neighbour at 80%)"
"$EACGM" record --force -o "$db" -- "$PYTHON" examples/gpt_ddp.py --seconds "$seconds" --signal "$signal" \
  --truth "$out/.truth"
[ -e "$signal" ] || { echo "demo: the training ended before the noisy neighbour was due" >&2; kill "$neighbour" 2>/dev/null || true; }
wait "$neighbour" 2>/dev/null || true
echo
"$EACGM" detect "$db"
echo
"$EACGM" export "$db" --perfetto "$out/demo.pftrace" --force
"$EACGM" report "$db"
"$EACGM" report "$db" --html "$out/demo.html" --force

# The CUDA side, when the toolkit built the bundled CUDA loop: 5,000 steps on CPU 0 (about
# 11 s), a noisy neighbour on that CPU for 1.5 s from 8 s after the recorder starts (about
# 60-80% into the recording: detect learns from the first half); plain record and detect.
cuda_db=$out/demo-cuda.eacgm.db
if [ -x "$DEMO_TRAIN" ]; then
  echo
  echo "demo: tracing the bundled CUDA training loop (no GPU needed: the calls fail, and are traced), a noisy neighbour at 70%"
  cuda_signal=$out/.cuda-neighbour-now
  rm -f "$cuda_signal"
  # the neighbour starts when the loop reaches 70% of its steps (it creates the file then), so
  # that it lands after detect's training half however long the start took
  ( while [ ! -e "$cuda_signal" ]; do sleep 0.05; done
    for _ in 1 2; do taskset -c 0 timeout 1.5 sh -c 'while :; do :; done' & done; wait ) \
    >/dev/null 2>&1 &
  cuda_neighbour=$!
  DEMO_SIGNAL="0.7:$cuda_signal" "$EACGM" record --force -o "$cuda_db" -q -- "$DEMO_TRAIN" 5000 0
  [ -e "$cuda_signal" ] || { echo "demo: the CUDA loop ended before its noisy neighbour was due" >&2; kill "$cuda_neighbour" 2>/dev/null || true; }
  wait "$cuda_neighbour" 2>/dev/null || true
  rm -f "$cuda_signal"
  "$EACGM" detect "$cuda_db"
  "$EACGM" report "$cuda_db" --html "$out/demo-cuda.html" --force
else
  cuda_db=""
fi
echo
cat <<MSG
demo: done. Where to look:
  $out/demo.html: the charts, in any browser (offline): latency over time with the anomalies
    as red crosses, the wait of each rank per step (rank 1 is the row the others wait for),
    host metrics with the anomalous windows, the anomalies table, the CPU profile's flame graph
  the anomalies above: rank 1 "joined ... late (straggler)" in the all_reduce; CPU interference
    in the time windows of the noisy neighbour (eacgm report $db lists them all)
  $out/demo.pftrace: open it in https://ui.perfetto.dev (one track per rank and thread, the
    operators' and collectives' Python stacks in each slice's arguments, anomalies marked)
  $db: the recording (SQLite; eacgm report, eacgm detect --help, or sqlite3); its CPU
    profile for go tool pprof or speedscope: eacgm export $db --pprof demo.pb.gz
MSG
[ -z "$cuda_db" ] ||
  echo "  $cuda_db: the CUDA loop's recording (its CPU interference above; eacgm report $cuda_db;
    its charts: $out/demo-cuda.html)"
