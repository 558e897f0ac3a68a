#!/usr/bin/env bash
# What a node's idle threads cost eacgm (issue 32): plain `eacgm agent` and `eacgm record
# --layers host -- sleep` beside a process holding THREADS idle threads (a busy GPU node runs
# thousands: data-loader workers, NCCL's and the runtime's own), the tracer's CPU (all its
# threads, user + system, from /proc/PID/stat) over WINDOW seconds, each binary in turn, ROUNDS
# times interleaved. Then the same with no extra threads, as the floor. The host layer's scan of
# the running threads at each sample was a task iterator over every task of the node until
# session 62 (per task), now a program over the CPUs (per CPU): BASELINE=an earlier build
# shows the difference in the same rounds.
#
#   bench/many_threads.sh                                          # build/eacgm
#   THREADS=8000 ROUNDS=2 BASELINE=/path/to/earlier/eacgm bench/many_threads.sh
# Run as root after scripts/build.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
EACGM=${EACGM:-build/eacgm}
BASELINE=${BASELINE:-}
ROUNDS=${ROUNDS:-2}
THREADS=${THREADS:-8000}
WINDOW=${WINDOW:-30}
PORT=${PORT:-19491}
PY=/usr/bin/python3
for v in ROUNDS THREADS WINDOW PORT; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "many_threads: $v must be a positive whole number, not '${!v}'"; exit 2; }
done
[ -x "$EACGM" ] || { echo "many_threads: no $EACGM: run scripts/build.sh first"; exit 1; }
[ -z "$BASELINE" ] || [ -x "$BASELINE" ] || { echo "many_threads: BASELINE=$BASELINE is not an executable"; exit 1; }
[ "$(id -u)" = 0 ] || { echo "many_threads: run as root (the agent needs CAP_BPF and CAP_PERFMON)"; exit 1; }
source bench/common.sh
scratch_with_cleanup  # $out, and $pids stopped at exit
hz=$(getconf CLK_TCK)
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# the idle threads: each waits on one event, 64 KiB stacks
cat >"$out/idle.py" <<'EOF'
import sys, threading, time
threading.stack_size(64 * 1024)
done = threading.Event()
for _ in range(int(sys.argv[1])):
    threading.Thread(target=done.wait, daemon=True).start()
print("ready", flush=True)
time.sleep(float(sys.argv[2]))
EOF

# measure BIN MODE N: the tracer's CPU ms over the window, beside N idle threads
measure() {
  local bin=$1 mode=$2 n=$3 idle tracer t0 t1
  $PY "$out/idle.py" "$n" $((WINDOW + 30)) >"$out/idle.out" &
  idle=$!
  pids+=("$idle")
  for _ in $(seq 600); do grep -q ready "$out/idle.out" 2>/dev/null && break; sleep 0.1; done
  if [ "$mode" = agent ]; then
    rm -rf "$out/state"
    "$bin" agent --state-dir "$out/state" --listen "127.0.0.1:$PORT" >"$out/tracer.log" 2>&1 &
  else
    "$bin" record -q --layers host -o "$out/rec.eacgm" -f -- sleep $((WINDOW + 10)) >"$out/tracer.log" 2>&1 &
  fi
  tracer=$!
  pids+=("$tracer")
  sleep 5  # past the start (loading, the first /proc walk)
  t0=$(ticks "$tracer")
  sleep "$WINDOW"
  t1=$(ticks "$tracer")
  kill -INT "$tracer" "$idle" 2>/dev/null || true
  wait "$tracer" "$idle" 2>/dev/null || true
  echo $(((t1 - t0) * 1000 / hz))
}

declare -A ms
bins=("$EACGM")
[ -z "$BASELINE" ] || bins+=("$BASELINE")
for round in $(seq "$ROUNDS"); do
  for mode in agent record; do
    for n in "$THREADS" 0; do
      for i in "${!bins[@]}"; do
        v=$(measure "${bins[$i]}" $mode "$n")
        ms[$i,$mode,$n]="${ms[$i,$mode,$n]:-} $v"
        echo "round $round: ${bins[$i]} $mode beside $n idle threads: $v ms CPU in ${WINDOW} s" >&2
      done
    done
  done
done
printf "%-34s %14s %14s %18s\n" "tracer (ms of CPU per ${WINDOW} s)" "$THREADS threads" "0 threads" "per 1000 threads"
for i in "${!bins[@]}"; do
  name=$([ "$i" = 0 ] && echo "this build" || echo "baseline")
  for mode in agent record; do
    a=$(median <<<"${ms[$i,$mode,$THREADS]}")
    b=$(median <<<"${ms[$i,$mode,0]}")
    printf "%-34s %14s %14s %18s\n" "$name $mode" "$a" "$b" \
      "$(awk -v a="$a" -v b="$b" -v n="$THREADS" 'BEGIN{printf "%.1f", (a - b) * 1000 / n}')"
  done
done
if [ -n "$BASELINE" ]; then
  for mode in agent record; do
    a=$(median <<<"${ms[0,$mode,$THREADS]}")
    b=$(median <<<"${ms[1,$mode,$THREADS]}")
    awk -v m="$mode" -v a="$a" -v b="$b" -v n="$THREADS" \
      'BEGIN{printf "ratio %s beside %d threads: this build / baseline %.2f\n", m, n, (b > 0) ? a / b : 0}'
  done
fi
