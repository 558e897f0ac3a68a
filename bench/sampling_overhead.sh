#!/usr/bin/env bash
# CPU used by `eacgm record --layers gpu,host` at 100 Hz sampling, as % of one core: on an idle
# target (sleep) and under a busy 2-thread workload, against the same recording without the
# sampled layers (--layers cuda) as the baseline, in one run. Also the time the kernel spends
# in the host layer's BPF programs (kernel.bpf_stats_enabled), which the traced and other tasks
# pay, not eacgm. There is no GPU here: the gpu layer samples the tests' fake NVML (4 GPUs,
# every metric answered), so its NVML cost is the fake's, not a driver's.
# Run as root after `cmake --build build --target benchmarks eacgm_unit_tests`.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${B:-build}
EACGM=$B/eacgm
BUSY=$B/bench/busy_threads
FAKE=$B/tests/unit/fake_nvml/full/libnvidia-ml.so.1
SECONDS_RUN=${SECONDS_RUN:-10}
out=$(mktemp -d)
trap 'rm -rf "$out"; sysctl -qw kernel.bpf_stats_enabled=0' EXIT
[ -x "$BUSY" ] && [ -x "$B/bench/wakeup_loop" ] && [ -f "$FAKE" ] ||
  { echo "build first: cmake --build $B --target benchmarks eacgm_unit_tests" >&2; exit 1; }

cat > "$out/nvml.script" <<'SCRIPT'
devices 4
utilization 0 50:20
utilization 1 50:20
utilization 2 50:20
utilization 3 50:20
memory 0 1000:80000
memory 1 1000:80000
memory 2 1000:80000
memory 3 1000:80000
temperature 0 60
power 0 300000
clock_sm 0 1980
pcie_tx 0 100
pcie_rx 0 100
clocks_event 0 0
SCRIPT
export EACGM_FAKE_NVML_SCRIPT=$out/nvml.script

ticks_of() {  # user+system clock ticks of a process, all threads
  awk '{print $14 + $15}' "/proc/$1/stat"
}
bpf_ns() {  # total run time of the loaded host_* BPF programs
  bpftool prog show --json | python3 -c '
import json, sys
print(sum(p.get("run_time_ns", 0) for p in json.load(sys.stdin) if p.get("name", "").startswith("host_")))'
}
# Steady-state CPU of eacgm between t=2 s and t=SECONDS_RUN-1 s of a recording (start-up, which
# loads the BPF programs and parses the kernel's BTF, is measured apart), and of the host BPF.
measure() {  # layers command... ; prints "cpu_pct bpf_pct"
  local layers=$1; shift
  $EACGM record -q -f -o "$out/run.db" --layers "$layers" --interval 10 --nvml-library "$FAKE" \
    -- "$@" >/dev/null 2>&1 &
  local pid=$! hz
  hz=$(getconf CLK_TCK)
  sleep 2
  local t0 b0 t1 b1
  t0=$(ticks_of $pid); b0=$(bpf_ns)
  sleep $((SECONDS_RUN - 3))
  t1=$(ticks_of $pid); b1=$(bpf_ns)
  wait $pid
  awk -v t="$((t1 - t0))" -v hz="$hz" -v b="$((b1 - b0))" -v s="$((SECONDS_RUN - 3))" \
    'BEGIN { printf "%.2f %.3f", 100 * t / hz / s, 100 * b / 1e9 / s }'
}

sysctl -qw kernel.bpf_stats_enabled=1
for load in idle busy; do
  if [ $load = idle ]; then cmd=(sleep "$SECONDS_RUN"); else cmd=("$BUSY" "$SECONDS_RUN"); fi
  read -r base _ <<<"$(measure cuda "${cmd[@]}")"
  read -r ours bpf <<<"$(measure gpu,host "${cmd[@]}")"
  rows=$(sqlite3 "$out/run.db" "select (select count(*) from gpu_samples) || ' gpu samples, ' || (select count(*) from host_samples) || ' host rows'")
  start=$(sqlite3 "$out/run.db" "select value from meta where key='recorder_cpu_seconds'")
  awk -v l=$load -v o="$ours" -v b="$base" -v k="$bpf" -v r="$rows" 'BEGIN {
    printf "sampling %s, 100 Hz gpu+host: ours %.2f%% of a core, baseline (cuda only) %.2f%%, added %.2f%% (target < 1%%); host BPF programs %.3f%% of a core; %s\n",
      l, o, b, o - b, k, r }'
done
echo "(steady state between 2 s and $((SECONDS_RUN - 1)) s; the whole last run, start-up included, used $start s of CPU)"
# What any 100 Hz sampler pays on this machine before doing any work: a thread that only wakes.
# In a VM each wakeup of an idle vCPU costs far more than on bare metal.
floor=$("$B/bench/wakeup_loop" 10 "$SECONDS_RUN")
echo "floor: a bare thread waking at 100 Hz uses ${floor}% of a core here"
