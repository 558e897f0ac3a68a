#!/usr/bin/env bash
# eacgm's own CPU beside a training (issue 32): the tracer's CPU (all its threads, from
# /proc/PID/stat) over a steady window of the GPT training of bench/train_steps.py, for plain
# `record` and plain `agent` (started 4 s before the job), each binary in turn, ROUNDS times
# interleaved. The agent's window (seconds FROM..FROM+WINDOW of the job) holds its first fits
# and refits, which a short job never reaches. Also the tracer's resident memory at the window's
# end, the training thread's CPU per step and, for the agent, how many anomaly lines it logged
# (the job is healthy: each is a false alarm).
#
#   ROUNDS=2 bench/own_cpu.sh                                   # build/eacgm
#   ROUNDS=2 BASELINE=/path/to/an/earlier/eacgm bench/own_cpu.sh  # an A/B, interleaved
# Run as root after scripts/build.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
EACGM=${EACGM:-build/eacgm}
BASELINE=${BASELINE:-}
ROUNDS=${ROUNDS:-2}
FROM=${FROM:-40}
WINDOW=${WINDOW:-30}
STEPS=${STEPS:-3200}
PORT=${PORT:-19489}
PY=/usr/bin/python3
for v in ROUNDS FROM WINDOW STEPS; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "own_cpu: $v must be a positive whole number, not '${!v}'"; exit 2; }
done
$PY -c "import torch" 2>/dev/null || { echo "own_cpu: python3-torch is not installed (scripts/setup.sh)"; exit 1; }
[ -x "$EACGM" ] || { echo "own_cpu: no $EACGM: run scripts/build.sh first"; exit 1; }
[ -z "$BASELINE" ] || [ -x "$BASELINE" ] || { echo "own_cpu: BASELINE=$BASELINE is not an executable"; exit 1; }
export OPENBLAS_NUM_THREADS=1
source bench/common.sh
scratch_with_cleanup  # $out, and $pids stopped at exit
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# per thread: "tid name ticks" (comm has no spaces for eacgm's threads; the main thread is "main")
thread_ticks() {
  local t
  for t in /proc/"$1"/task/*; do
    awk -v main="$1" '{ n = substr($2, 2, length($2) - 2); if ($1 == main) n = "main"; print $1, n, $14 + $15 }' "$t/stat" 2>/dev/null || true
  done
}
hz=$(getconf CLK_TCK)
one() {  # BINARY LABEL record|agent
  local d="$out/$2-$3" tracer job
  mkdir -p "$d"
  if [ "$3" = agent ]; then
    "$1" agent --state-dir "$d/state" --listen 127.0.0.1:$PORT 2>"$d/agent.log" &
    tracer=$!; pids=("$tracer"); sleep 4
    $PY bench/train_steps.py "$STEPS" none gpt >"$d/train.log" 2>&1 &
    job=$!; pids+=("$job")
  else
    "$1" record -q -f -o "$d/r.db" -- $PY bench/train_steps.py "$STEPS" none gpt >"$d/train.log" 2>&1 &
    tracer=$!; job=$tracer; pids=("$tracer")
  fi
  sleep "$FROM"
  local c1 c2
  c1=$(ticks "$tracer")
  thread_ticks "$tracer" >"$d/threads0"
  sleep "$WINDOW"
  kill -0 "$job" 2>/dev/null || { echo "own_cpu: the training ended inside the window; raise STEPS" >&2; exit 1; }
  c2=$(ticks "$tracer")
  thread_ticks "$tracer" >"$d/threads1"
  local rss
  rss=$(awk '/^VmRSS/ { print int($2 / 1024) }' "/proc/$tracer/status")
  wait "$job" || true
  [ "$3" = record ] || { kill -INT "$tracer"; wait "$tracer" || true; }
  pids=()
  local alarms=""
  [ "$3" = record ] || alarms=", $(grep -c 'anomaly:' "$d/agent.log" || true) anomaly lines"
  awk -v l="$2 $3" -v c=$((c2 - c1)) -v hz="$hz" -v w="$WINDOW" -v t="$(tail -1 "$d/train.log")" -v a="$alarms" -v m="$rss" \
    'BEGIN { printf "%-16s own CPU %6.0f ms in %d s (%.2f%% of a core), RSS %d MiB; %s%s\n", l, c * 1000 / hz, w, c * 100 / hz / w, m, t, a }'
  # by thread, in ms (a thread that ended in the window, as a flight recording's writer may, is
  # in the total above but not here)
  awk -v hz="$hz" 'NR == FNR { at[$1] = $3; next }
    { ms[$2] += ($3 - ($1 in at ? at[$1] : 0)) * 1000 / hz }
    END { line = "                   by thread:"; for (n in ms) if (ms[n] > 0) line = line sprintf(" %s %d ms", n, ms[n]); print line }' \
    "$d/threads0" "$d/threads1"
  [ "$3" = record ] || grep 'anomaly:' "$d/agent.log" | cut -c1-150 | sed 's/^/                   /' || true
}
for r in $(seq "$ROUNDS"); do
  for mode in record agent; do
    one "$EACGM" eacgm "$mode"
    [ -z "$BASELINE" ] || one "$BASELINE" baseline "$mode"
  done
done
