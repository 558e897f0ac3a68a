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

# 4 GPUs, every metric answered the way a current driver answers (instant power and the PCIe
# byte counters as field values), and the older functions too (answered, but not called).
{
  echo "devices 4"
  for g in 0 1 2 3; do
    printf '%s\n' "utilization $g 50:20" "memory $g 1000:80000" "temperature $g 60" \
      "power_instant $g 300000" "power $g 300000" "power_limit $g 700000" "clock_sm $g 1980" \
      "clock_mem $g 2619" "pcie_tx_count $g *3" "pcie_rx_count $g *2" "pcie_tx $g 100" \
      "pcie_rx $g 100" "clocks_event $g 0" "ecc_corrected $g 0" "ecc_uncorrected $g 0" \
      "nvlink_tx $g *1" "nvlink_rx $g *1"
  done
} > "$out/nvml.script"
export EACGM_FAKE_NVML_SCRIPT=$out/nvml.script

threads_of() {  # per thread: name, CPU ns, times it ran (schedstat: run ns, wait ns, slices)
  local t
  for t in /proc/$1/task/*; do
    echo "$(cat "$t/comm") $(cat "$t/schedstat" 2>/dev/null)"
  done
}
bpf_ns() {  # total run time of the loaded host_* BPF programs
  bpftool prog show --json | python3 -c '
import json, sys
print(sum(p.get("run_time_ns", 0) for p in json.load(sys.stdin) if p.get("name", "").startswith("host_")))'
}
# Steady-state CPU of eacgm between t=2 s and t=SECONDS_RUN-1 s of a recording (start-up, which
# loads the BPF programs and parses the kernel's BTF, is measured apart), per thread from
# /proc/PID/task/*/schedstat (ns), and of the host BPF.
measure() {  # layers command... ; prints "cpu_pct bpf_pct wakeups_per_s per-thread..."
  local layers=$1; shift
  $EACGM record -q -f -o "$out/run.db" --layers "$layers" --interval 10 --nvml-library "$FAKE" \
    -- "$@" >/dev/null 2>&1 &
  local pid=$!
  sleep 2
  local b0 b1 s=$((SECONDS_RUN - 3))
  threads_of $pid > "$out/t0"; b0=$(bpf_ns)
  sleep $s
  threads_of $pid > "$out/t1"; b1=$(bpf_ns)
  wait $pid
  # threads are matched by line: none start or end in the steady state
  paste -d' ' "$out/t0" "$out/t1" | awk -v b="$((b1 - b0))" -v s="$s" '
    { cpu += $6 - $2; runs += $8 - $4; per[$1] += $6 - $2 }
    END {
      printf "%.3f %.3f %.0f", 100 * cpu / 1e9 / s, 100 * b / 1e9 / s, runs / s
      for (n in per) printf " %s=%.3f%%", n, 100 * per[n] / 1e9 / s
    }'
}

sysctl -qw kernel.bpf_stats_enabled=1
# What any periodic sampler pays here before doing any work: a thread that only wakes. In a VM
# each wakeup costs far more than on bare metal (this one: about 50 us of CPU).
floor=$("$B/bench/wakeup_loop" 10 "$SECONDS_RUN")
per_wake_us=$(awk -v f="$floor" 'BEGIN { printf "%.1f", f / 100 * 1e6 / 100 }')
for load in idle busy; do
  if [ $load = idle ]; then cmd=(sleep "$SECONDS_RUN"); else cmd=("$BUSY" "$SECONDS_RUN"); fi
  read -r base _ <<<"$(measure cuda "${cmd[@]}")"
  read -r ours bpf wakes threads <<<"$(measure gpu,host "${cmd[@]}")"
  rows=$(sqlite3 "$out/run.db" "select (select count(*) from gpu_samples) || ' gpu samples, ' || (select count(*) from host_samples) || ' host rows'")
  start=$(sqlite3 "$out/run.db" "select value from meta where key='recorder_cpu_seconds'")
  awk -v l=$load -v o="$ours" -v b="$base" -v k="$bpf" -v r="$rows" -v w="$wakes" \
    -v pw="$per_wake_us" -v t="$threads" 'BEGIN {
    printf "sampling %s, 100 Hz gpu+host: ours %.2f%% of a core, baseline (cuda only) %.2f%%, added %.2f%% (target < 1%%); host BPF programs %.3f%% of a core; %s\n",
      l, o, b, o - b, k, r
    printf "  threads: %s; %d wakeups/s, at %s us each (the floor below) %.2f%% of a core, the rest %.2f%%\n",
      t, w, pw, w * pw / 1e4, o - w * pw / 1e4 }'
done
echo "(steady state between 2 s and $((SECONDS_RUN - 1)) s; the whole last run, start-up included, used $start s of CPU)"
echo "floor: a bare thread waking at 100 Hz uses ${floor}% of a core here (${per_wake_us} us per wakeup)"
