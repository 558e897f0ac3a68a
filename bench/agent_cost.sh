#!/usr/bin/env bash
# What `eacgm agent` costs a node, in one run: its CPU (% of one core, from /proc/PID/stat) on
# an idle node and beside a traced job (the demo training loop on CPU 0, whose step time is
# compared with the same loop without the agent: the baseline), then process churn (one new
# traced process a second, CHURN_S seconds; the issue's figure is an hour: CHURN_S=3600) with
# the agent's RSS, open fds and BPF map count before, every eighth of the way and after. The
# agent runs with --history HISTORY_S (default 120 s): its models' training samples of the
# past HISTORY_S are memory that grows by design until the history is full (at most 20,000
# samples per operation), so RSS is flat only after that; the default hour would hide a leak
# behind the history filling. Run as root after scripts/build.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
EACGM=build/eacgm
DEMO=build/demo_train
IDLE_S=${IDLE_S:-30}
STEPS=${STEPS:-15000}
CHURN_S=${CHURN_S:-300}
HISTORY_S=${HISTORY_S:-120}
PORT=${PORT:-19466}
[ -x "$DEMO" ] || { echo "no $DEMO (needs nvcc: scripts/build.sh builds it)"; exit 1; }
out=$(mktemp -d)
agent=""
cleanup() {
  if [ -n "$agent" ] && ! kill -0 "$agent" 2>/dev/null; then
    echo "the agent died; the end of its log:"
    tail -20 "$out/agent.log"
  fi
  [ -n "$agent" ] && kill "$agent" 2>/dev/null
  wait 2>/dev/null || true
  rm -rf "$out"
}
trap cleanup EXIT
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
cpu_pct() {  # pid seconds: % of one core over the next seconds
  local a b
  a=$(ticks "$1"); sleep "$2"; b=$(ticks "$1")
  awk -v a="$a" -v b="$b" -v s="$2" -v hz="$hz" 'BEGIN{printf "%.2f", (b - a) / hz / s * 100}'
}
steps_per_s() {  # the demo loop on CPU 0, untraced or under the agent
  local t0 t1
  t0=$(date +%s.%N); $DEMO "$STEPS" 0 >/dev/null 2>&1; t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" -v n="$STEPS" 'BEGIN{printf "%.0f", n / (b - a)}'
}
rss_kb() {
  awk '/^VmRSS/ {print $2}' "/proc/$1/status" 2>/dev/null || { echo "the agent is gone" >&2; exit 1; }
}
fds() { ls "/proc/$1/fd" | wc -l; }
maps() { bpftool map show 2>/dev/null | grep -c '^[0-9]*:' || true; }

base=$(steps_per_s)
$EACGM agent -q --listen 127.0.0.1:$PORT --state-dir "$out/state" --history "$HISTORY_S" \
  2>"$out/agent.log" &
agent=$!
until curl -sf 127.0.0.1:$PORT/metrics >/dev/null; do sleep 0.2; done
sleep 5
idle=$(cpu_pct "$agent" "$IDLE_S")
$DEMO 100000000 0 >/dev/null 2>&1 &
demo=$!
sleep 5
events() { curl -sf 127.0.0.1:$PORT/metrics | awk '/^eacgm_agent_events_total / {print $2}'; }
e0=$(events)
busy=$(cpu_pct "$agent" "$IDLE_S")
e1=$(events)
kill "$demo"; wait "$demo" 2>/dev/null || true
traced=$(steps_per_s)
echo "agent CPU, idle node ($IDLE_S s): $idle% of a core"
rate=$(awk -v a="$e0" -v b="$e1" -v s="$IDLE_S" 'BEGIN{printf "%.0f", (b - a) / s}')
echo "agent CPU, beside the demo loop ($rate traced calls/s): $busy% of a core"
awk -v a="$base" -v b="$traced" 'BEGIN{printf "demo loop: %d steps/s untraced (baseline), %d under the agent: %.3fx\n", a, b, b / a}'

# churn: a new short-lived traced process every second
rss0=$(rss_kb "$agent"); fd0=$(fds "$agent"); map0=$(maps)
churn=()
step=$(( CHURN_S / 8 > 0 ? CHURN_S / 8 : 1 ))
curve=""
for i in $(seq "$CHURN_S"); do
  $DEMO 20 >/dev/null 2>&1 &
  churn+=($!)
  sleep 1
  if (( i % step == 0 )); then
    wait "${churn[@]}" 2>/dev/null || true
    churn=()
    curve+=" ${i}s:$(( $(rss_kb "$agent") / 1024 ))"
  fi
done
(( ${#churn[@]} )) && { wait "${churn[@]}" 2>/dev/null || true; }
sleep 3
rss1=$(rss_kb "$agent"); fd1=$(fds "$agent"); map1=$(maps)
echo "churn, $CHURN_S traced processes over $CHURN_S s (--history $HISTORY_S): RSS $((rss0 / 1024)) -> $((rss1 / 1024)) MiB, fds $fd0 -> $fd1, BPF maps $map0 -> $map1"
echo "RSS in MiB along the way:$curve"
