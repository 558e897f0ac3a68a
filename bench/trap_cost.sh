#!/usr/bin/env bash
# What a uprobe costs on this machine, by how the kernel enters: a trap on an instruction it
# emulates (push: a function's usual first instruction), a trap plus a single-step (mov: a
# second trap, #DB, which a VM may exit to its hypervisor for), a 5-byte nop (Linux 6.18+ turns
# a probed nop5 into a call to a trampoline that makes a system call: no trap), and the return
# probe (a uretprobe: a system call since Linux 6.11 on x86-64); beside them a plain system
# call and a page fault, which every traced program pays anyway. Each as ns per call over the
# same untraced call, best of 3, with a bpftrace uprobe (or uretprobe) counting hits. The
# figures move a lot between days in a VM (session 60: a trap 5 us, a system call 1 us, a page
# fault 11 us), so compare eacgm's per-call costs with them measured the same hour.
#   bench/trap_cost.sh            # after: cmake --build build --target benchmarks
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=build/bench/kernel_entry
N=${N:-200000}
[[ $N =~ ^[1-9][0-9]*$ ]] || { echo "N must be a positive whole number, not '$N'"; exit 2; }
[ -x "$BIN" ] || { echo "trap_cost.sh: build first: cmake --build build --target benchmarks" >&2; exit 1; }
command -v bpftrace >/dev/null || { echo "trap_cost.sh: no bpftrace (scripts/setup.sh installs it)" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "trap_cost.sh: run as root (uprobes need CAP_BPF and CAP_PERFMON)" >&2; exit 1; }
source bench/common.sh
path=$(readlink -f "$BIN")
probed() {  # KIND uprobe|uretprobe: ns per call with bpftrace's probe on the function
  bpftrace -q -c "$path $1 $N" -e "$2:$path:entry_$1 { @hits = count(); } END { clear(@hits); }" 2>/dev/null
}
printf "%-44s %10s %10s %10s\n" "entry" "untraced" "probed" "added"
for kind in push mov nop5; do
  plain=$(best_of ns_per_call $BIN $kind $N)
  for probe in uprobe uretprobe; do
    with=$(best_of ns_per_call probed $kind $probe)
    awk -v k="$kind" -v p="$probe" -v a="$plain" -v b="$with" 'BEGIN {
      what = (p == "uprobe") ? "uprobe on" : "uprobe+uretprobe on"
      insn = (k == "push") ? "push (emulated)" : (k == "mov") ? "mov (single-stepped)" : "nop5 (optimized)"
      printf "%-44s %8.0f ns %8.0f ns %8.0f ns\n", what " " insn, a, b, b - a }'
  done
done
sys=$(best_of ns_per_call $BIN syscall $N)
fault=$(best_of ns_per_call $BIN fault $((N / 4)))
printf "%-44s %8.0f ns\n" "a system call (getppid)" "$sys"
printf "%-44s %8.0f ns (CPU time)\n" "a page fault (first touch of a 4 KiB page)" "$fault"
echo "(kernel $(uname -r); eacgm's torch and cuda probes sit on emulated instructions: a push at"
echo " entry, a conditional jump at exit, so each call costs two 'uprobe on push' traps)"
