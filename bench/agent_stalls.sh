#!/usr/bin/env bash
# How long plain `eacgm agent` holds a training's steps up (issue 31: a step held up by the
# agent's own work is a slow step it may then report). The GPT step of bench/step_stalls.py
# runs DURATION seconds untraced and beside the agent (started 3 s before it; its first fits come at
# 30 s, refits as the history doubles), which is asked for a flight recording (SIGUSR1) at each
# of DUMPS seconds; per step, wall time less the training thread's CPU time is the stall.
# Rounds interleave the configurations; printed per configuration: the medians over rounds of
# the 99th-percentile and largest stall, the steps held up over 12 ms, the largest stall in
# the 3 s from each dump (untraced: the same seconds), and the anomaly lines
# (the job is healthy: each is a false alarm), then the ratios against the untraced run.
# OpenBLAS keeps its default worker thread, as a user's job would.
#
#   bench/agent_stalls.sh                                        # ROUNDS=2 DURATION=80
#   BASELINE=/path/to/an/earlier/eacgm bench/agent_stalls.sh     # an A/B, same rounds
# Run as root after scripts/build.sh, with nothing else busy on the machine.
set -euo pipefail
cd "$(dirname "$0")/.."
EACGM=${EACGM:-build/eacgm}
BASELINE=${BASELINE:-}
ROUNDS=${ROUNDS:-2}
DURATION=${DURATION:-80}
DUMPS=${DUMPS:-"40 60"}
PORT=${PORT:-19491}
KEEP=${KEEP:-}  # a directory to keep each run's steps, marks and agent log in
PY=/usr/bin/python3
for v in ROUNDS DURATION; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "agent_stalls: $v must be a positive whole number, not '${!v}'"; exit 2; }
done
prev=3
for d in $DUMPS; do
  [[ $d =~ ^[0-9]+$ ]] && (( d > prev && d < DURATION )) ||
    { echo "agent_stalls: DUMPS holds '$d': whole seconds of the agent, rising, after 3 and before DURATION ($DURATION)"; exit 2; }
  prev=$d
done
[ "$prev" != 3 ] || { echo "agent_stalls: DUMPS is empty: give at least one second to ask for a flight recording at"; exit 2; }
$PY -c "import torch" 2>/dev/null || { echo "agent_stalls: python3-torch is not installed (scripts/setup.sh)"; exit 1; }
[ -x "$EACGM" ] || { echo "agent_stalls: no $EACGM: run scripts/build.sh first"; exit 1; }
[ -z "$KEEP" ] || mkdir -p "$KEEP" || { echo "agent_stalls: cannot make KEEP=$KEEP"; exit 1; }
[ -z "$BASELINE" ] || [ -x "$BASELINE" ] || { echo "agent_stalls: BASELINE=$BASELINE is not an executable"; exit 1; }
source bench/common.sh
scratch_with_cleanup  # $out, and $pids stopped at exit
one() {  # LABEL ROUND [BINARY]: the untraced run keeps the same schedule, without the agent
  local d="$out/$1.$2" agent="" last=0
  mkdir -p "$d"
  if [ -n "${3:-}" ]; then
    "$3" agent --state-dir "$d/state" --listen 127.0.0.1:$PORT --dump-interval 5 2>"$d/agent.log" &
    agent=$!
    pids=("$agent")
  fi
  sleep 3
  $PY bench/step_stalls.py "$DURATION" "$d/steps.json" &
  local job=$!
  pids+=("$job")
  for t in $DUMPS; do
    sleep $((t - 3 - last)); last=$((t - 3))
    cut -d' ' -f1 /proc/uptime >>"$d/marks"  # (CLOCK_BOOTTIME: no process started for it)
    [ -z "$agent" ] || kill -USR1 "$agent"
  done
  wait "$job"
  [ -z "$agent" ] || { kill -INT "$agent"; wait "$agent" || true; }
  pids=()
  [ -z "$KEEP" ] || cp -r "$d" "$KEEP/"
}
labels=(untraced agent)
[ -z "$BASELINE" ] || labels+=("baseline-agent")
for r in $(seq "$ROUNDS"); do
  echo "round $r of $ROUNDS" >&2
  for l in "${labels[@]}"; do
    case $l in
      untraced) one "$l" "$r" ;;
      agent) one "$l" "$r" "$EACGM" ;;
      baseline-agent) one "$l" "$r" "$BASELINE" ;;
    esac
  done
done
$PY - "$out" "${labels[@]}" <<'PY'
import glob, json, os, statistics, sys, time
out, labels = sys.argv[1], sys.argv[2:]
# the marks are CLOCK_BOOTTIME, the steps CLOCK_MONOTONIC
to_mono = time.clock_gettime(time.CLOCK_MONOTONIC) - time.clock_gettime(time.CLOCK_BOOTTIME)
res = {}
for l in labels:
    per = []
    for d in sorted(glob.glob(f"{out}/{l}.*")):
        steps = json.load(open(f"{d}/steps.json"))[20:]  # (the first steps: warm-up)
        stall = sorted((w - c) / 1e6 for _, w, c in steps)
        log = f"{d}/agent.log"
        alarms = sum(l.startswith("eacgm: anomaly:") for l in open(log)) if os.path.exists(log) else 0
        marks = [(float(x) + to_mono) * 1e9 for x in open(f"{d}/marks")]
        # the largest stall in the 3 s from each dump asked for (untraced: the same seconds)
        at_dump = max(((w - c) / 1e6 for t, w, c in steps if any(m <= t + w and t < m + 3e9 for m in marks)),
                      default=0)
        per.append((statistics.median(c / 1e6 for _, _, c in steps), stall[int(len(stall) * 0.99)],
                    stall[-1], sum(s > 12 for s in stall), at_dump, alarms))
    res[l] = [statistics.median(x) for x in zip(*per)]
print(f"{'configuration':16} {'cpu ms/step':>11} {'p99 stall ms':>12} {'max stall ms':>12} "
      f"{'steps >12 ms':>12} {'max at dumps':>12} {'anomaly lines':>13}")
for l in labels:
    c, p99, mx, n, dmp, a = res[l]
    print(f"{l:16} {c:11.2f} {p99:12.2f} {mx:12.1f} {n:12.1f} {dmp:12.1f} {a:13.1f}")
base = res["untraced"]
for l in labels[1:]:
    print(f"ratios {l}/untraced: p99 stall {res[l][1] / max(base[1], 1e-3):.2f}, "
          f"steps held up >12 ms {res[l][3]:.0f} against {base[3]:.0f}")
PY
