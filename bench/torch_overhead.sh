#!/usr/bin/env bash
# Slowdown of a small GPT training loop on CPU (steps/s) under eacgm's torch and comm layers
# and python against no tracing, torch.profiler with stacks and cProfile,
# all measured in one run, alternating, best of ROUNDS. Run as root after the build.
# LAYERS overrides the eacgm layer sets measured (space-separated list of --layers values).
set -euo pipefail
cd "$(dirname "$0")/.."
EACGM=build/eacgm
PY=/usr/bin/python3
STEPS=${STEPS:-300}
ROUNDS=${ROUNDS:-3}
LAYERS=${LAYERS:-"torch torch,comm python,torch,comm"}
SIZE=${SIZE:-small}  # small (about 1 ms per step) or medium (tens of ms)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
$PY -c "import torch" 2>/dev/null || { echo "python3-torch is not installed (scripts/setup.sh)"; exit 1; }

rate() { sed -n 's/.*steps_per_s=\([0-9.]*\).*/\1/p'; }
declare -A best
keep() {  # name value: keep the highest rate
  local cur=${best[$1]:-0}
  best[$1]=$(awk -v a="$2" -v b="$cur" 'BEGIN{print (a>b)?a:b}')
}
for r in $(seq "$ROUNDS"); do
  keep none "$($PY bench/train_steps.py "$STEPS" none "$SIZE" | rate)"
  for l in $LAYERS; do
    keep "eacgm:$l" "$($EACGM record -q -f -o "$out/r.db" --layers "$l" -- \
                       $PY bench/train_steps.py "$STEPS" none "$SIZE" | rate)"
  done
  keep torch-profiler "$($PY bench/train_steps.py "$STEPS" torch-profiler "$SIZE" | rate)"
  keep cprofile "$($PY bench/train_steps.py "$STEPS" cprofile "$SIZE" | rate)"
done
base=${best[none]}
printf "%-28s %10s %10s\n" "configuration" "steps/s" "slowdown"
for k in none $(for l in $LAYERS; do echo "eacgm:$l"; done) torch-profiler cprofile; do
  awk -v k="$k" -v v="${best[$k]}" -v b="$base" \
    'BEGIN{printf "%-28s %10.1f %9.1f%%\n", k, v, (b / v - 1) * 100}'
done
echo "model size $SIZE, $STEPS steps per run, best of $ROUNDS rounds"
echo "torch calls recorded in the last eacgm run: $(sqlite3 "$out/r.db" 'select count(*) from torch_calls')"
