#!/usr/bin/env bash
# Issue 32's figures: what plain `eacgm record -- CMD` and plain `eacgm agent` cost a PyTorch
# training thread, per step, against the same training untraced and under cProfile, measured
# in one run (ROUNDS interleaved rounds, medians); then where the cost goes.
#
#   ROUNDS=5 STEPS=300 SIZE=gpt bench/step_cost.sh
#   WORKLOAD=gloo ROUNDS=5 STEPS=3000 bench/step_cost.sh   # a 2-rank Gloo step, rank 0's thread
#
# The workload is bench/train_steps.py (CPU, one intra-op thread): SIZE=gpt is the issue's
# shape (three blocks, width 128, context 64, batch 5: ~126 traced operators and ~21 ms of the
# training thread's CPU per step on this VM), small the tests' tiny model (~1 ms per step, the
# worst case for a per-call tracer). The figure is the training thread's own CPU time per step
# (time.thread_time: where probes run; waiting for a CPU does not count), because steps/s moves
# +-4% between identical runs here. WORKLOAD=gloo is bench/gloo_steps.py under launch_ranks.py:
# two ranks, each step four small matmuls and an all_reduce of 64 KiB (about 1 ms; no cProfile
# configuration there). OPENBLAS_NUM_THREADS defaults to 1: with OpenBLAS's worker
# thread, the training thread's share of a matmul changes from run to run (15 or 23 ms per step
# for the same training), which drowns a 3% effect; set it to measure that case anyway.
#
# Part 1, the ratios: untraced (the baseline), plain `record`, plain `agent` (started before
# the training, on a scratch state folder and port), cProfile; EXTRA adds record
# configurations, ';'-separated argument lists (EXTRA="--layers torch --sample-hz 0;--no-off-cpu");
# BASELINE=PATH adds plain record and agent of another eacgm binary (an earlier build), in the
# same rounds, for an A/B of a change.
# Part 2 (ACCOUNT=0 leaves it out), the breakdown of one plain `record` of the same training:
# each BPF program's runs and run time per step (kernel.bpf_stats_enabled, over a window of the
# steady state), the traps into the kernel that the uprobes cost before any program runs
# (measured in the same run: an untraced 3.10 call loop while a probe sits on its interpreter),
# the training thread's context switches per step, and eacgm's own threads' CPU per step.
# Run as root after scripts/build.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
EACGM=${EACGM:-build/eacgm}
PY=/usr/bin/python3
PY310=/root/.pyenv/versions/3.10.13/bin/python3.10
ROUNDS=${ROUNDS:-5}
STEPS=${STEPS:-300}
SIZE=${SIZE:-gpt}
WORKLOAD=${WORKLOAD:-gpt}
EXTRA=${EXTRA:-}
BASELINE=${BASELINE:-}
ACCOUNT=${ACCOUNT:-1}
PORT=${PORT:-19477}
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
for v in ROUNDS STEPS; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "$v must be a positive whole number, not '${!v}'"; exit 2; }
done
case "$WORKLOAD" in gpt|gloo) ;; *) echo "WORKLOAD is gpt or gloo, not '$WORKLOAD'"; exit 2 ;; esac
$PY -c "import torch" 2>/dev/null || { echo "python3-torch is not installed (scripts/setup.sh)"; exit 1; }
[ -x "$EACGM" ] || { echo "no $EACGM: run scripts/build.sh first"; exit 1; }
out=$(mktemp -d)
agent=""
old_stats=$(cat /proc/sys/kernel/bpf_stats_enabled)
hold=""
cleanup() {
  set +e  # (a killed process waits non-zero: errexit would end the cleanup there)
  [ -n "$agent" ] && kill -INT "$agent" 2>/dev/null && wait "$agent" 2>/dev/null
  [ -n "$hold" ] && kill -INT "$hold" 2>/dev/null && wait "$hold" 2>/dev/null
  sysctl -qw kernel.bpf_stats_enabled="$old_stats"
  rm -rf "$out"
}
trap cleanup EXIT
source bench/common.sh
# train [COMMAND PREFIX...]: one run of the workload, its last line 'steps_per_s=X cpu_ms_per_step=Y'
if [ "$WORKLOAD" = gloo ]; then
  workload() { echo $PY tests/e2e/workloads/launch_ranks.py 2 bench/gloo_steps.py "$1"; }
else
  workload() { echo $PY bench/train_steps.py "$1" "${MODE:-none}" "$SIZE"; }
fi
train() { "$@" $(workload "$STEPS") | tail -1; }

start_agent() {  # [BINARY]
  ${1:-$EACGM} agent -q --listen 127.0.0.1:$PORT --state-dir "$out/state" 2>>"$out/agent.log" &
  agent=$!
  for _ in $(seq 150); do
    curl -sf 127.0.0.1:$PORT/metrics >/dev/null 2>&1 && return 0
    kill -0 "$agent" 2>/dev/null || break
    sleep 0.2
  done
  echo "the agent did not serve /metrics in 30 s:"; tail -5 "$out/agent.log"; exit 1
}
stop_agent() { kill -INT "$agent"; wait "$agent" 2>/dev/null || true; agent=""; }

# --- Part 1: interleaved rounds -------------------------------------------------------------
declare -A best cpus
IFS=';' read -r -a extra <<<"$EXTRA"
names=(untraced record agent)
[ "$WORKLOAD" = gloo ] || names+=(cprofile)
[ -z "$BASELINE" ] || names+=("baseline record" "baseline agent")
for x in "${extra[@]}"; do names+=("record $x"); done
for r in $(seq "$ROUNDS"); do
  keep untraced "$(train)"
  keep record "$(train $EACGM record -q -f -o "$out/r.db" --)"
  start_agent
  keep agent "$(train)"
  stop_agent
  [ "$WORKLOAD" = gloo ] || keep cprofile "$(MODE=cprofile train)"
  if [ -n "$BASELINE" ]; then
    keep "baseline record" "$(train "$BASELINE" record -q -f -o "$out/b.db" --)"
    start_agent "$BASELINE"
    keep "baseline agent" "$(train)"
    stop_agent
  fi
  for x in "${extra[@]}"; do
    # shellcheck disable=SC2086
    keep "record $x" "$(train $EACGM record -q -f -o "$out/x.db" $x --)"
  done
  echo "round $r of $ROUNDS done" >&2
done
base=$(median <<<"${cpus[untraced]}")
# added CPU as the median of each round's ratio to that round's untraced run: the machine's
# speed drifts by several percent over minutes, which pairing within a round takes out
paired() {
  awk -v a="${cpus[$1]}" -v b="${cpus[untraced]}" 'BEGIN {
    n = split(a, x, " "); split(b, y, " ")
    for (i = 1; i <= n; i++) r[i] = x[i] / y[i]
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (r[j] < r[i]) { t = r[i]; r[i] = r[j]; r[j] = t }
    printf "%.4f", (n % 2) ? r[(n + 1) / 2] : (r[n / 2] + r[n / 2 + 1]) / 2 }'
}
echo "training: $(workload "$STEPS") (OPENBLAS_NUM_THREADS=$OPENBLAS_NUM_THREADS), $ROUNDS interleaved rounds"
printf "%-44s %12s %16s %9s\n" "configuration" "cpu ms/step" "rounds min-max" "added"
for k in "${names[@]}"; do
  m=$(median <<<"${cpus[$k]}")
  range=$(tr ' ' '\n' <<<"${cpus[$k]}" | grep . | sort -g | awk 'NR==1{a=$1} {b=$1} END{printf "%.2f-%.2f", a, b}')
  awk -v k="$k" -v m="$m" -v r="$range" -v p="$(paired "$k")" \
    'BEGIN{printf "%-44s %12.3f %16s %8.1f%%\n", k, m, r, (p - 1) * 100}'
done
echo "(added: the median over rounds of the configuration's CPU per step over the untraced run's in the same round)"
rec=$(paired record); ag=$(paired agent)
cp=0; [ "$WORKLOAD" = gloo ] || cp=$(paired cprofile)
awk -v r="$rec" -v a="$ag" -v c="$cp" 'BEGIN{
  printf "ratios: record/untraced %.3f, agent/untraced %.3f", r, a
  if (c > 0) printf ", record/cProfile %.3f", r / c
  printf "\n" }'
[ -z "$BASELINE" ] || awk -v r="$rec" -v a="$ag" -v br="$(paired "baseline record")" \
  -v ba="$(paired "baseline agent")" -v bin="$BASELINE" 'BEGIN{
  printf "against the baseline binary (%s): record adds %.1f%% vs %.1f%%, agent %.1f%% vs %.1f%%\n", bin, (r - 1) * 100, (br - 1) * 100, (a - 1) * 100, (ba - 1) * 100 }'
echo "torch calls in the last plain record: $(sqlite3 "$out/r.db" 'select count(*) from torch_calls'), layers: $(sqlite3 "$out/r.db" "select value from meta where key='layers'")"

[ "$ACCOUNT" = 1 ] || exit 0

# --- Part 2: where it goes ------------------------------------------------------------------
# The trap: an untraced 3.10 call loop, alone and while a probe sits on its interpreter file.
trap_ns=0
if [ -x "$PY310" ]; then
  plain=$($PY310 bench/python_call_loop.py 2000000 | value ns_per_call)
  if hold_python_probe "$EACGM" "$out" "$plain"; then
    probed=$($PY310 bench/python_call_loop.py 2000000 | value ns_per_call)
  else
    probed=""
  fi
  kill -INT "$hold" 2>/dev/null || true; wait "$hold" 2>/dev/null || true; hold=""
  # the program's own part of such a hit is ~150 ns (its first map lookup fails)
  [ -n "$probed" ] && trap_ns=$(awk -v p="$probed" -v b="$plain" 'BEGIN{ printf "%.0f", p - b - 150 }')
  [ -n "$probed" ] && echo "trap: a 3.10 call costs $plain ns untraced, $probed ns with a probe on its interpreter: ~$trap_ns ns per uprobe hit besides the program"
else
  echo "no $PY310 (scripts/setup.sh): traps not measured, programs only"
fi

snap() {  # name run_time_ns run_cnt, one line per loaded program
  bpftool prog show -j | $PY -c '
import json, sys
for p in json.load(sys.stdin):
    if "run_cnt" in p:
        print(p["id"], p.get("name", "?"), p.get("run_time_ns", 0), p.get("run_cnt", 0))'
}
sysctl -qw kernel.bpf_stats_enabled=1
WIN=${WINDOW_S:-4}
long=$((STEPS * 4))
hz=$(getconf CLK_TCK)
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
ctx() { awk '/ctxt_switches/ {s += $2} END {print s}' "/proc/$1/task/$1/status"; }
# breakdown record|agent: one training of $long steps under plain `record` (launched by it) or
# beside plain `agent` (started first); the counters over WIN seconds of its steady state
breakdown() {
  local tracer what
  if [ "$1" = record ]; then
    # shellcheck disable=SC2046
    $EACGM record -f -o "$out/a.db" -- $(MODE=none workload "$long") >"$out/a.out" 2>&1 &
    tracer=$!
    what="eacgm record (its own threads: reader, decoder, writer, samplers)"
  else
    start_agent
    # shellcheck disable=SC2046
    $(MODE=none workload "$long") >"$out/a.out" 2>&1 &
    tracer=$agent
    what="eacgm agent (all its threads: the node's sampling, detection, flight recorder)"
  fi
  local job=$!
  for _ in $(seq 600); do grep -qx warm "$out/a.out" && break; sleep 0.1; done
  grep -qx warm "$out/a.out" || { echo "the training printed no 'warm' in 60 s:"; cat "$out/a.out"; exit 1; }
  sleep 0.5
  # the training process (rank 0's for gloo: the first started), not the recorder
  local tpid
  if [ "$WORKLOAD" = gloo ]; then
    tpid=$(pgrep -f "^$PY bench/gloo_steps.py $long" | head -1)
  else
    tpid=$(pgrep -f "^$PY bench/train_steps.py $long" | head -1)
  fi
  [ -n "$tpid" ] || { echo "cannot find the training process"; exit 1; }
  local c0 c1 e0 e1
  snap > "$out/s0"; c0=$(ctx "$tpid"); e0=$(ticks "$tracer")
  sleep "$WIN"
  snap > "$out/s1"; c1=$(ctx "$tpid"); e1=$(ticks "$tracer")
  kill -0 "$tpid" 2>/dev/null || echo "warning: the training ended inside the window; raise STEPS" >&2
  wait $job || { echo "the $1 run failed:"; cat "$out/a.out"; exit 1; }
  [ "$1" = record ] || stop_agent
  local sps cms
  sps=$(grep -o 'steps_per_s=[0-9.]*' "$out/a.out" | cut -d= -f2)
  cms=$(grep -o 'cpu_ms_per_step=[0-9.]*' "$out/a.out" | cut -d= -f2)
  [ -n "$cms" ] || { echo "the training under $1 printed no result:"; cat "$out/a.out"; exit 1; }
  echo
  echo "breakdown of one plain $1 (window of ${WIN} s in the steady state; $sps steps/s, training thread ${cms} ms CPU per step):"
  join <(sort "$out/s0") <(sort "$out/s1") | awk -v sps="$sps" -v cms="$cms" -v trap="$trap_ns" -v w="$WIN" '
    $7 > $4 {
      runs = ($7 - $4) / w / sps; ns = ($6 - $3) / ($7 - $4)
      up = ($2 ~ /^call_|^py_eval|^loader/) ? 1 : 0   # uprobes: each run is also a trap
      us = runs * (ns + up * trap) / 1000
      if (us >= 0.05)
        printf "  %-22s %8.1f runs/step %6.0f ns/run %s %8.1f us/step\n", $2, runs, ns, up ? "+ trap" : "       ", us
      total += us
    }
    END { printf "  %-22s %55.1f us/step (programs and traps; %.1f%% of the step)\n", "BPF total", total, total / cms / 10 }'
  awk -v a="$c0" -v b="$c1" -v w="$WIN" -v sps="$sps" 'BEGIN{printf "  training thread: %.2f context switches per step\n", (b - a) / w / sps}'
  awk -v a="$e0" -v b="$e1" -v w="$WIN" -v sps="$sps" -v hz="$hz" -v what="$what" \
    'BEGIN{printf "  %s: %.0f us CPU per step (%.1f%% of a core)\n", what, (b - a) / hz / w / sps * 1e6, (b - a) / hz / w * 100}'
}
breakdown record
sqlite3 "$out/a.db" "select 'recording: ' || (select count(*) from torch_calls) || ' torch calls, ' ||
  (select value from meta where key = 'python_stacks_reused') || ' of their Python stacks reused (one of the thread''s last), ' ||
  (select count(*) from stack_samples) || ' CPU samples, ' || (select value from meta where key = 'dropped_events') || ' dropped'"
breakdown agent
