#!/usr/bin/env bash
# Per-call cost of `eacgm record` on a tight cudaMalloc loop, against no tracing and against
# bpftrace with the same uprobe+uretprobe pair, measured in one run; then a paced 100k calls/s
# run and a 2-thread maximum-rate run, checking drops and the recorder's CPU use. Run as root
# after `cmake --build build --target benchmarks`.
set -euo pipefail
cd "$(dirname "$0")/.."
B=build
LOOP=$B/bench/cuda_call_loop
EACGM=${EACGM:-$B/eacgm}  # another build: EACGM=/path/to/eacgm
N=${N:-1000000}
# (awk reads to the end: exiting at the match would leave ldconfig writing into a closed pipe,
# and under pipefail its SIGPIPE ended this script, silently, about one run in five)
LIB=$(ldconfig -p | awk '/libcudart.so.13 / && !found {print $NF; found = 1}')
[ -x "$LOOP" ] && [ -x "$EACGM" ] ||
  { echo "record_overhead.sh: build first: cmake --build build --target benchmarks" >&2; exit 1; }
[ -n "$LIB" ] || { echo "record_overhead.sh: no libcudart.so.13 in ldconfig's cache: install the CUDA toolkit (scripts/setup.sh)" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

source bench/common.sh
bpftrace_run() {
  bpftrace -q -c "$LOOP $N" -e "uprobe:$LIB:cudaMalloc { @s[tid] = nsecs; }
    uretprobe:$LIB:cudaMalloc /@s[tid]/ { @c = count(); delete(@s[tid]); } END { clear(@s); clear(@c); }" \
    2>/dev/null
}
eacgm_run() { $EACGM record -q -f -o "$out/r.db" -- $LOOP "$N"; }

base=$(best_of ns_per_call $LOOP "$N")
bt=$(best_of ns_per_call bpftrace_run)
ea=$(best_of ns_per_call eacgm_run)
awk -v b="$base" -v t="$bt" -v e="$ea" 'BEGIN {
  printf "untraced: %.1f ns/call\n", b
  printf "per-call added cost: ours %.0f ns, baseline bpftrace %.0f ns, ratio %.2f (target <= 1.0, issue 32)\n",
         e - b, t - b, (e - b) / (t - b) }'
recorded=$(sqlite3 "$out/r.db" "select count(*) from cuda_calls")
echo "last eacgm run recorded $recorded calls of $((N + 1)) made, dropped $(sqlite3 "$out/r.db" "select value from meta where key='dropped_events'")"

# RATIO_ONLY=1: the ratio alone (e.g. `for i in 1 2 3 4 5; do RATIO_ONLY=1 bench/record_overhead.sh;
# done` for the ratio over five runs)
[ -n "${RATIO_ONLY:-}" ] && exit 0

# 100k calls/s for 10 s: drops and the recorder's CPU (user+sys seconds / wall seconds)
$EACGM record -q -f -o "$out/p.db" -- $LOOP 1000000 1 100000 >/dev/null
sqlite3 "$out/p.db" "select 'paced 100k/s: recorded ' || (select count(*) from cuda_calls) ||
  ', dropped ' || (select value from meta where key='dropped_events') ||
  ', recorder cpu ' || printf('%.1f', 100.0 * ((select value from meta where key='recorder_cpu_seconds') -
    (select value from meta where key='recorder_start_cpu_seconds')) /
  ((select value from meta where key='end_monotonic_ns') - (select value from meta where key='start_monotonic_ns')) * 1e9) || '% of one core'"

# two threads as fast as they go, for at least 10 s (about 830k calls/s here)
$EACGM record -q -f -o "$out/m.db" -- $LOOP 4500000 2 | tee "$out/m.txt" >/dev/null
echo "max rate, 2 threads: $(sed -n 's/.*rate=\([0-9]*\).*/\1/p' "$out/m.txt") calls/s made; $(sqlite3 "$out/m.db" "select 'recorded ' || count(*) || ', dropped ' || (select value from meta where key='dropped_events') from cuda_calls")"
