#!/usr/bin/env bash
# What the torch layer adds to one operator call, in one run: a loop of torch.mm untraced (the
# baseline), under `eacgm record --layers torch --torch-ops mm` (entry probe + exit probe at the
# operator's stack-protector check), and under bpftrace with an entry uprobe and a uretprobe on
# the same function (the usual way, which aborts the program when the operator throws).
# Best of 3 each. Run as root after the build.
set -euo pipefail
cd "$(dirname "$0")/.."
EACGM=build/eacgm
PY=/usr/bin/python3
N=${N:-100000}
LIB=$($PY -c 'import torch, os; print(os.path.realpath(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")))')
SYM=$(nm -D --defined-only "$LIB" | awk '/ _ZN2at4_ops2mm4callE/ && !s {s = $3} END {print s}')
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

source bench/common.sh
untraced() { $PY bench/torch_op_loop.py "$N"; }
ours() { $EACGM record -q -f -o "$out/r.db" --layers torch --torch-ops mm -- $PY bench/torch_op_loop.py "$N"; }
bpftrace_run() {
  bpftrace -q -c "$PY bench/torch_op_loop.py $N" \
    -e "uprobe:$LIB:$SYM { @s[tid] = nsecs; } uretprobe:$LIB:$SYM /@s[tid]/ { @c = count(); delete(@s[tid]); } END { clear(@s); clear(@c); }" 2>/dev/null
}
base=$(best_of ns_per_call untraced)
ea=$(best_of ns_per_call ours)
bt=$(best_of ns_per_call bpftrace_run)
awk -v b="$base" -v e="$ea" -v t="$bt" 'BEGIN {
  printf "torch.mm untraced: %.0f ns/call\n", b
  printf "added per call: eacgm %.0f ns, baseline bpftrace uprobe+uretprobe %.0f ns, ratio %.2f\n",
         e - b, t - b, (e - b) / (t - b) }'
echo "last eacgm run recorded $(sqlite3 "$out/r.db" "select count(*) from torch_calls") calls of $((N + 1000))"
