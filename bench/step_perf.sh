#!/usr/bin/env bash
# Where a traced training thread's time goes, read from the thread itself: `perf record` samples
# the GPT training's thread (bench/train_steps.py gpt, OPENBLAS_NUM_THREADS=1) at 20 kHz for
# WINDOW_S seconds of its steady state under plain `eacgm record -- CMD` (TRACER=record, the
# default) or beside plain `eacgm agent` (TRACER=agent), and prints the share of its samples in
# the uprobe path (the int3 trap and all it runs), in eacgm's programs and the helpers they call,
# in the Python stack walk, and in the trap without the programs; then "added": that share over
# the rest, what the probes add to an untraced step.
#
#   bench/step_perf.sh                    # plain record
#   TRACER=agent WINDOW_S=10 bench/step_perf.sh
#
# Unlike the CPU-per-step ratios (bench/step_cost.sh, bench/step_cost_ab.sh), which this VM's
# noise blurs by several percent, 160,000 samples give a share to +-0.05%. What it does not see:
# what the traps cost the code around them (caches, TLB), and work done with interrupts off
# (the CPU profile's program runs in a timer interrupt, as perf's own sampling does: its cost is
# bench/step_cost.sh's bpf_stats breakdown). Run as root after scripts/build.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
EACGM=${EACGM:-build/eacgm}
PY=/usr/bin/python3
TRACER=${TRACER:-record}
WINDOW_S=${WINDOW_S:-8}
PORT=${PORT:-19481}
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
case "$TRACER" in record|agent) ;; *) echo "TRACER is record or agent, not '$TRACER'"; exit 2 ;; esac
[[ $WINDOW_S =~ ^[1-9][0-9]*$ ]] || { echo "WINDOW_S must be a whole number of seconds, not '$WINDOW_S'"; exit 2; }
command -v perf >/dev/null || { echo "no perf (scripts/setup.sh installs linux-perf)"; exit 1; }
[ -x "$EACGM" ] || { echo "no $EACGM: run scripts/build.sh first"; exit 1; }
out=$(mktemp -d)
pids=()
old_rate=$(cat /proc/sys/kernel/perf_event_max_sample_rate)
cleanup() {
  for p in "${pids[@]}"; do kill -INT "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  sysctl -qw kernel.perf_event_max_sample_rate="$old_rate"
  rm -rf "$out"
}
trap cleanup EXIT
sysctl -qw kernel.perf_event_max_sample_rate=50000

steps=$((WINDOW_S * 120 + 600))  # outlasts the window at up to ~100 steps a second
train=("$PY" bench/train_steps.py "$steps" none gpt)
if [ "$TRACER" = record ]; then
  $EACGM record -q -f -o "$out/r.db" -- "${train[@]}" >"$out/train.out" 2>&1 &
  pids+=($!)
else
  $EACGM agent -q --listen 127.0.0.1:$PORT --state-dir "$out/state" 2>>"$out/agent.log" &
  pids+=($!)
  for _ in $(seq 150); do curl -sf 127.0.0.1:$PORT/metrics >/dev/null 2>&1 && break; sleep 0.2; done
  curl -sf 127.0.0.1:$PORT/metrics >/dev/null || { echo "the agent did not serve /metrics in 30 s:"; tail -5 "$out/agent.log"; exit 1; }
  "${train[@]}" >"$out/train.out" 2>&1 &
  pids+=($!)
fi
for _ in $(seq 600); do grep -qx warm "$out/train.out" && break; sleep 0.1; done
grep -qx warm "$out/train.out" || { echo "the training printed no 'warm' in 60 s:"; cat "$out/train.out"; exit 1; }
sleep 1
tid=$(pgrep -f "^$PY bench/train_steps.py $steps" | head -1)
[ -n "$tid" ] || { echo "cannot find the training process"; exit 1; }
perf record -q -F 20000 -g -t "$tid" -o "$out/perf.data" -- sleep "$WINDOW_S" >/dev/null 2>&1
grep -q steps_per_s "$out/train.out" && { echo "the training ended inside the window; rerun"; exit 1; }
# children: a symbol's share with all it calls
perf report -i "$out/perf.data" --children --sort sym --stdio -g none 2>/dev/null >"$out/children"
share() { awk -v s="$1" '$4 ~ s { gsub("%", "", $1); v += $1 } END { printf "%.2f", v }' "$out/children"; }
total=$(share '^asm_exc_int3$')
progs=$(share '^uprobe_prog_run$')
walk=$(share '_py_read_stack$')
samples=$(sed -n 's/^# Samples: \([0-9.]*[KM]*\) .*/\1/p' "$out/children" | head -1)
echo "plain $TRACER, the GPT training thread (tid $tid), $WINDOW_S s at 20 kHz${samples:+ ($samples samples)}:"
awk -v t="$total" -v p="$progs" -v w="$walk" 'BEGIN {
  printf "  uprobe path (the int3 trap and all it runs)   %6.2f%% of the thread\n", t
  printf "    eacgm'\''s programs and their helpers          %6.2f%%\n", p
  printf "      of which the Python stack walk            %6.2f%%\n", w
  printf "    the trap without the programs               %6.2f%%\n", t - p
  printf "  added to an untraced step: %.2f%% (the uprobe path over the rest of the thread)\n", 100 * t / (100 - t) }'
