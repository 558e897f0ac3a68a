#!/usr/bin/env bash
# eacgm's own CPU per recorded CUDA call (issue 32): `eacgm record` of a tight cudaMalloc loop
# (build/bench/cuda_call_loop N), its threads' CPU after the start (recorder_cpu_seconds less
# recorder_start_cpu_seconds: the decoding and writing, not the verifier at load) over the rows
# it wrote. ROUNDS interleaved rounds, the median per binary; BASELINE adds another eacgm binary
# (an earlier build) to the same rounds, for an A/B. The loop's rate moves 300-580k calls/s
# between runs here, and batch sizes with it: one run per build cannot tell ~15% apart.
#
#   ROUNDS=7 BASELINE=/tmp/eacgm-before bench/recorder_cpu.sh
# Run as root after `cmake --build build --target benchmarks`.
set -euo pipefail
cd "$(dirname "$0")/.."
EACGM=${EACGM:-build/eacgm}
BASELINE=${BASELINE:-}
ROUNDS=${ROUNDS:-5}
N=${N:-3000000}
LOOP=build/bench/cuda_call_loop
[ -x "$LOOP" ] && [ -x "$EACGM" ] ||
  { echo "recorder_cpu.sh: build first: cmake --build build --target benchmarks" >&2; exit 1; }
[ -z "$BASELINE" ] || [ -x "$BASELINE" ] ||
  { echo "recorder_cpu.sh: BASELINE=$BASELINE is not an executable eacgm" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
source bench/common.sh

# ns of eacgm's CPU per CUDA call row of one recording by binary $1
per_row() {
  "$1" record -q -f -o "$out/r.db" -- "$LOOP" "$N" >/dev/null
  sqlite3 "$out/r.db" "select printf('%.0f', 1e9 * ((select value from meta where
    key = 'recorder_cpu_seconds') - (select value from meta where key =
    'recorder_start_cpu_seconds')) / count(*)) from cuda_calls"
}

ours="" base=""
for r in $(seq "$ROUNDS"); do
  v=$(per_row "$EACGM"); ours="$ours $v"
  line="round $r of $ROUNDS: $EACGM $v ns"
  if [ -n "$BASELINE" ]; then
    v=$(per_row "$BASELINE"); base="$base $v"
    line="$line, $BASELINE $v ns"
  fi
  echo "$line"
done
echo "recorder CPU per recorded CUDA call ($N calls a run, median of $ROUNDS): $EACGM $(median <<<"$ours") ns"
[ -z "$BASELINE" ] || echo "  baseline $BASELINE $(median <<<"$base") ns"
