#!/usr/bin/env bash
# What the default `--layers auto` costs against `--layers cuda` (the old default) on the bench
# workloads, measured in one run, alternating, ROUNDS times: a tight cudaMalloc loop (ns per
# call, best round), the tests' small GPT training on CPU (steps/s, best round) and a two-rank
# Gloo loop (steps/s of rank 0, best round). Untraced runs are shown for scale. Run as root
# after `cmake --build build --target benchmarks`.
set -euo pipefail
cd "$(dirname "$0")/.."
EACGM=build/eacgm
LOOP=build/bench/cuda_call_loop
PY=/usr/bin/python3
N=${N:-300000}
STEPS=${STEPS:-300}
GLOO_STEPS=${GLOO_STEPS:-1000}
ROUNDS=${ROUNDS:-3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
[ -x "$LOOP" ] || { echo "build the benchmarks first: cmake --build build --target benchmarks"; exit 1; }
$PY -c "import torch" 2>/dev/null || { echo "python3-torch is not installed (scripts/setup.sh)"; exit 1; }
source bench/common.sh

declare -A best
keep() {  # name value higher_is_better
  local cur=${best[$1]:-}
  best[$1]=$(awk -v a="$2" -v b="$cur" -v hi="$3" \
    'BEGIN{print (b=="" || (hi && a>b) || (!hi && a<b)) ? a : b}')
}
rec() {  # layers cmd...: the command under eacgm record
  local layers=$1
  shift
  if [ "$layers" = none ]; then "$@"; else $EACGM record -q -f -o "$out/r.db" --layers "$layers" -- "$@" 2>/dev/null; fi
}
for r in $(seq "$ROUNDS"); do
  for l in none cuda auto; do
    keep "cuda-loop:$l" "$(rec "$l" $LOOP "$N" | value ns_per_call)" 0
    keep "torch-train:$l" "$(rec "$l" $PY bench/train_steps.py "$STEPS" none small | value steps_per_s)" 1
    keep "gloo-train:$l" "$(rec "$l" $PY tests/e2e/workloads/launch_ranks.py 2 bench/gloo_steps.py \
                             "$GLOO_STEPS" | value steps_per_s)" 1
  done
done
echo "layers in the last auto run: $(sqlite3 "$out/r.db" "select value from meta where key='layers'")"
awk -v u="${best[cuda-loop:none]}" -v c="${best[cuda-loop:cuda]}" -v a="${best[cuda-loop:auto]}" 'BEGIN{
  printf "cuda-loop ns/call (untraced %.1f): ours (auto) %.0f, baseline (--layers cuda) %.0f, ratio %.2f\n", u, a, c, a / c }'
for w in torch-train gloo-train; do
  awk -v w="$w" -v u="${best[$w:none]}" -v c="${best[$w:cuda]}" -v a="${best[$w:auto]}" 'BEGIN{
    printf "%s steps/s (untraced %.1f): ours (auto) %.1f, baseline (--layers cuda) %.1f, ratio %.2f (slowdown vs untraced: auto %.1f%%, cuda %.1f%%)\n",
           w, u, a, c, c / a, (u / a - 1) * 100, (u / c - 1) * 100 }'
done
echo "$ROUNDS rounds, best of each; N=$N, STEPS=$STEPS, GLOO_STEPS=$GLOO_STEPS"
