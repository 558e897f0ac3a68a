#!/usr/bin/env bash
# What the Python stack of one operator call costs, in one run, apart from the rest of the torch
# layer: a loop of torch.mm run DEPTH Python frames deep (bench/torch_op_loop.py N DEPTH), traced
# with `--layers torch --torch-ops mm` (the operator's probes, no stack) and with
# `--layers torch,python` (the same and its Python stack, read at each call's entry; kept at
# --python-stack-depth 8, the default, and 32). A stack here is one of the thread's last ones
# again at every call, so it is read whole and not sent: the walk's own cost. Best of 3 each;
# with BASELINE=path/to/eacgm, the same for that binary in the same run, and the ratios.
# Usage: [N=50000] [DEPTH=10] [BASELINE=...] bench/stack_walk_cost.sh. Root, after the build.
set -euo pipefail
cd "$(dirname "$0")/.."
EACGM=${EACGM:-build/eacgm}
BASELINE=${BASELINE:-}
PY=/usr/bin/python3
N=${N:-50000}
DEPTH=${DEPTH:-10}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
source bench/common.sh

untraced() { $PY bench/torch_op_loop.py "$N" "$DEPTH"; }
traced() {  # BINARY LAYERS [ARGS...]
  local bin=$1 layers=$2
  shift 2
  "$bin" record -q -f -o "$out/r.db" --layers "$layers" --torch-ops mm --sample-hz 0 "$@" -- \
    $PY bench/torch_op_loop.py "$N" "$DEPTH"
}
base=$(best_of ns_per_call untraced)
echo "torch.mm at $((DEPTH + 2)) Python frames deep, untraced: $base ns/call"
# each configuration by both binaries in turn, so that a drift of the machine meets both
ours="" theirs=""
for args in "torch" "torch,python --python-stack-depth 8" "torch,python --python-stack-depth 32"; do
  v=$(best_of ns_per_call traced "$EACGM" $args)
  ours="$ours $((v - base))"
  if [ -n "$BASELINE" ]; then
    v=$(best_of ns_per_call traced "$BASELINE" $args)
    theirs="$theirs $((v - base))"
  fi
done
row() {  # NAME "torch stack8 stack32" (added ns per call)
  set -- "$1" $2
  printf '%-9s torch layer +%4d ns; with stacks, depth 8: +%4d ns (the stack %4d ns)' \
    "$1" "$2" "$3" "$(($3 - $2))"
  printf ', depth 32: +%4d ns (%4d ns)\n' "$4" "$(($4 - $2))"
}
row eacgm "$ours"
if [ -n "$BASELINE" ]; then
  row baseline "$theirs"
  awk -v o="$ours" -v t="$theirs" 'BEGIN { split(o, a, " "); split(t, b, " ")
    printf "ratio eacgm/baseline, the stack alone: depth 8 %.2f, depth 32 %.2f\n",
      (a[2] - a[1]) / (b[2] - b[1]), (a[3] - a[1]) / (b[3] - b[1]) }'
fi
sqlite3 "$out/r.db" "select 'last run: ' || count(*) || ' calls, ' || count(distinct py_stack) || ' stacks' from torch_calls"
