#!/usr/bin/env bash
# Slowdown of a small GPT training loop on CPU (steps/s) under eacgm's torch and comm layers
# and python against no tracing, torch.profiler with stacks and cProfile,
# all measured in one run, alternating, ROUNDS times: steps/s (best round) and the training
# thread's own CPU time per step (median round; probes run in that thread, time spent waiting
# for a CPU does not count, so other load on the machine moves it less). Run as root after the
# build.
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

source bench/common.sh
declare -A best cpus
for r in $(seq "$ROUNDS"); do
  keep none "$($PY bench/train_steps.py "$STEPS" none "$SIZE")"
  for l in $LAYERS; do
    keep "eacgm:$l" "$($EACGM record -q -f -o "$out/r.db" --layers "$l" -- \
                       $PY bench/train_steps.py "$STEPS" none "$SIZE")"
  done
  keep torch-profiler "$($PY bench/train_steps.py "$STEPS" torch-profiler "$SIZE")"
  keep cprofile "$($PY bench/train_steps.py "$STEPS" cprofile "$SIZE")"
done
base=${best[none]}
base_cpu=$(median <<<"${cpus[none]}")
# steps/s: best of the rounds; CPU: the training thread's own CPU time per step (probes run in
# it; waiting for a CPU does not count), median of the rounds
printf "%-28s %10s %10s %14s %10s\n" "configuration" "steps/s" "slowdown" "cpu ms/step" "cpu added"
for k in none $(for l in $LAYERS; do echo "eacgm:$l"; done) torch-profiler cprofile; do
  c=$(median <<<"${cpus[$k]}")
  awk -v k="$k" -v v="${best[$k]}" -v b="$base" -v c="$c" -v bc="$base_cpu" \
    'BEGIN{printf "%-28s %10.1f %9.1f%% %14.3f %9.1f%%\n", k, v, (b / v - 1) * 100, c, (c / bc - 1) * 100}'
done
echo "model size $SIZE, $STEPS steps per run, $ROUNDS rounds (steps/s: best; cpu: median)"
echo "torch calls recorded in the last eacgm run: $(sqlite3 "$out/r.db" 'select count(*) from torch_calls')"
