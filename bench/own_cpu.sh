#!/usr/bin/env bash
# eacgm's own CPU beside a training (issue 32): the tracer's CPU (all its threads, from
# /proc/PID/stat) over a steady window of the GPT training of bench/train_steps.py, for plain
# `record` and plain `agent` (started 4 s before the job), each binary in turn, ROUNDS times
# interleaved. The agent's window (seconds FROM..FROM+WINDOW of the job) holds its first fits
# and refits, which a short job never reaches. Also the training thread's CPU per step and,
# for the agent, how many anomaly lines it logged (the job is healthy: each is a false alarm).
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
  sleep "$WINDOW"
  kill -0 "$job" 2>/dev/null || { echo "own_cpu: the training ended inside the window; raise STEPS" >&2; exit 1; }
  c2=$(ticks "$tracer")
  wait "$job" || true
  [ "$3" = record ] || { kill -INT "$tracer"; wait "$tracer" || true; }
  pids=()
  local alarms=""
  [ "$3" = record ] || alarms=", $(grep -c 'anomaly:' "$d/agent.log" || true) anomaly lines"
  awk -v l="$2 $3" -v c=$((c2 - c1)) -v hz="$hz" -v w="$WINDOW" -v t="$(tail -1 "$d/train.log")" -v a="$alarms" \
    'BEGIN { printf "%-16s own CPU %6.0f ms in %d s (%.2f%% of a core); %s%s\n", l, c * 1000 / hz, w, c * 100 / hz / w, t, a }'
}
for r in $(seq "$ROUNDS"); do
  for mode in record agent; do
    one "$EACGM" eacgm "$mode"
    [ -z "$BASELINE" ] || one "$BASELINE" baseline "$mode"
  done
done
