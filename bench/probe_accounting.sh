#!/usr/bin/env bash
# What eacgm's probes cost a workload, from the kernel's own counters: while a recording runs,
# each BPF program's run count and run time (kernel.bpf_stats_enabled), over a window of the
# workload's steady state; plus the trap into the kernel and back that every probe hit pays
# before any program runs, measured in the same run (a 3.10 call loop in a process eacgm does
# not trace, while the probe is on the same interpreter file: each call traps, the program
# returns at its first map lookup). Prints per program runs/s and ns/run, and the sum
#   runs/s x (ns/run + trap)
# as % of one core: the time the traced threads spend in probes. A wall-clock slowdown of a
# ~50 ms training step is not resolvable in a noisy VM; this accounting is, but it is a lower
# bound: it leaves out what the traps cost the code around them (caches, TLB), the Python calls
# the 3.11+ hook keeps from being inlined, and eacgm's own threads competing for the CPUs (on the
# small model it accounted for 0.76 of the 1.15 ms a step got slower; see bench/README.md).
# Usage: bench/probe_accounting.sh [LAYERS [COMMAND...]]
#   default: python,torch,comm on the medium tiny-GPT (bench/train_steps.py 400 none medium)
# Run as root after `cmake --build build --target eacgm`.
set -euo pipefail
cd "$(dirname "$0")/.."
EACGM=${EACGM:-build/eacgm}
PY310=/root/.pyenv/versions/3.10.13/bin/python3.10
WINDOW_S=${WINDOW_S:-4}
source bench/common.sh
layers=${1:-python,torch,comm}
shift || true
# The window opens when the command prints a line WARM_MARK (train_steps.py: "warm", after its
# warm-up steps; before that, imports and the first steps run other code, at other rates), else
# 2 s after the programs load.
WARM_MARK=${WARM_MARK:-}
if [ $# -eq 0 ]; then
  set -- /usr/bin/python3 bench/train_steps.py 400 none medium
  WARM_MARK=warm
fi
out=$(mktemp -d)
old_stats=$(cat /proc/sys/kernel/bpf_stats_enabled)
trap 'rm -rf "$out"; sysctl -qw kernel.bpf_stats_enabled=$old_stats; kill $(jobs -p) 2>/dev/null || true' EXIT
sysctl -qw kernel.bpf_stats_enabled=1

prog_ids() {  # ids of the recording's probe programs (by name: bpftool's full listing stops at
  local n    # a program that goes away while it lists)
  for n in py_eval_session py_eval_entry py_eval_return call_entry call_exit call_return \
           call_entry_multi call_exit_multi call_return_multi; do
    bpftool prog show name "$n" 2>/dev/null | grep -o '^[0-9]*' || true
  done
}
snapshot() {  # id name run_time_ns run_cnt, one line per program
  local id
  for id in "$@"; do
    bpftool prog show id "$id" | awk -v i="$id" 'NR == 1 {
      rt = 0; rc = 0
      for (k = 1; k <= NF; k++) { if ($k == "run_time_ns") rt = $(k + 1); if ($k == "run_cnt") rc = $(k + 1) }
      print i, $4, rt, rc }'
  done
}
# Waits until the recording's programs are loaded and attached (the command then starts).
wait_attached() {
  local i
  for i in $(seq 100); do
    [ -n "$(bpftool prog show name loader_update 2>/dev/null)" ] && return 0
    sleep 0.1
  done
  echo "the recording's programs did not load in 10 s" >&2
  exit 1
}

# 1. The trap: an untraced 3.10 call loop, alone and while the probe sits on its interpreter.
trap_ns=""
if [ -x "$PY310" ]; then
  base=$($PY310 bench/python_call_loop.py 2000000 | sed -n 's/ns_per_call=//p')
  if hold_python_probe "$EACGM" "$out" "$base"; then
    probed=$($PY310 bench/python_call_loop.py 2000000 | sed -n 's/ns_per_call=//p')
    ids=$(prog_ids)
    snapshot $ids > "$out/h0"
    $PY310 bench/python_call_loop.py 1000000 >/dev/null
    snapshot $ids > "$out/h1"
    kill -INT "$hold" 2>/dev/null || true; wait "$hold" 2>/dev/null || true
    # the program's own part of an untraced hit, from its counters
    prog_ns=$(paste -d' ' "$out/h0" "$out/h1" | awk '$8 > $4 { r += $8 - $4; t += $7 - $3 } END { if (r) printf "%.0f", t / r; else print 0 }')
    trap_ns=$(awk -v p="$probed" -v b="$base" -v g="$prog_ns" 'BEGIN { printf "%.0f", p - b - g }')
    echo "trap: an untraced 3.10 call costs ${probed} ns with the probe on its interpreter, ${base} ns without; ${prog_ns} ns of it the program, so the trap is ${trap_ns} ns"
  else
    kill -INT "$hold" 2>/dev/null || true; wait "$hold" 2>/dev/null || true
    trap_ns=0  # (said why above) program time only
  fi
else
  echo "$PY310 is not installed (scripts/setup.sh): no trap measurement, program time only"
  trap_ns=0
fi

# 2. The workload, recorded; counters read twice in its steady state.
$EACGM record -q -f -o "$out/run.db" --layers "$layers" ${RECORD_ARGS:-} -- "$@" > "$out/run.out" 2>&1 &
rec=$!
wait_attached
if [ -n "$WARM_MARK" ]; then
  for i in $(seq 600); do grep -qx "$WARM_MARK" "$out/run.out" && break; sleep 0.1; done
  grep -qx "$WARM_MARK" "$out/run.out" || { echo "no '$WARM_MARK' line from the command in 60 s" >&2; exit 1; }
  sleep 0.5
else
  sleep 2
fi
ids=$(prog_ids)
snapshot $ids > "$out/s0"
sleep "$WINDOW_S"
snapshot $ids > "$out/s1"
running=1
kill -0 $rec 2>/dev/null || running=0
wait $rec || { echo "the recording failed:"; cat "$out/run.out"; exit 1; }
[ $running = 1 ] || echo "warning: the command ended inside the window; give it more work" >&2
echo "workload: --layers $layers ${RECORD_ARGS:-}-- $*"
sed 's/^/  /' "$out/run.out"
paste -d' ' "$out/s0" "$out/s1" | awk -v s="$WINDOW_S" -v trap="$trap_ns" '
  $8 > $4 {
    r = ($8 - $4) / s; ns = ($7 - $3) / ($8 - $4)
    printf "  %-18s %9.0f runs/s %7.0f ns/run  -> %.2f%% of a core\n", $2, r, ns, r * (ns + trap) / 1e7
    total += r * (ns + trap)
  }
  END { printf "probes: %.2f%% of a core (program time plus %d ns of trap per run)\n", total / 1e7, trap }'
