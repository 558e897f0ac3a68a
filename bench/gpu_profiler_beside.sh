#!/usr/bin/env bash
# torch.profiler beside eacgm's GPU time, on a machine with a GPU: CUPTI gives a process one set
# of record buffers, and a job that runs torch.profiler (Kineto) under `eacgm record` has two
# clients of it. This holds what the job's own profiler sees under `eacgm record` against what
# it sees alone, for each size of the injection library's buffers (EACGM_GPUTIME_BUFFER_KB), and
# what eacgm's gpu_activity kept; then what each size costs the training without the profiler.
#
#   STEPS=150 (the profiled training's steps)  SIZES="4096 256 32" (KB)  COST_SECONDS=8
# Prints one line per run; needs a python3 with CUDA PyTorch (PYTHON) and eacgm (EACGM, default
# build/eacgm); run from the repository.
set -uo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-150} SIZES=${SIZES:-"4096 256 32"} COST_SECONDS=${COST_SECONDS:-8}
eacgm=${EACGM:-build/eacgm}
. bench/common.sh
py=$(cuda_python gpu_profiler_beside.sh) || exit 2
[ -x "$eacgm" ] || { echo "gpu_profiler_beside.sh: no eacgm at $eacgm (build first, or set EACGM)" >&2; exit 2; }
work=$(mktemp -d /tmp/eacgm-profiler-beside.XXXXXX)
trap 'rm -rf "$work"' EXIT
train=(scripts/gpu_check/train.py --device cuda)
q() {  # q DB SQL: the first column of each row (Python's sqlite3: a GPU machine may lack the sqlite3 command)
  "$py" -c "import sqlite3, sys; print('\n'.join(str(r[0]) for r in sqlite3.connect(sys.argv[1]).execute(sys.argv[2])))" "$1" "$2" 2>/dev/null || echo '?'
}

# kernels torch.profiler saw (copies, fills and annotations apart), per step
kernels() {
  "$py" - "$1" <<'EOF'
import json, sys
p = json.load(open(sys.argv[1]))
n = sum(v for k, v in p["kernels"].items() if not k.startswith(("Memcpy", "Memset")) and "#" not in k)
print(f"{n} {n / p['steps']:.2f}")
EOF
}

timeout 300 "$py" "${train[@]}" --steps "$STEPS" --profile "$work/alone.json" --result "$work/alone_r.json" >/dev/null 2>&1 \
  || { echo "gpu_profiler_beside.sh: the training failed without eacgm" >&2; exit 1; }
read -r alone alone_per <<<"$(kernels "$work/alone.json")"
echo "torch.profiler alone: $alone kernels in $STEPS steps ($alone_per per step)"
for kb in $SIZES; do
  EACGM_GPUTIME_BUFFER_KB=$kb timeout 300 "$eacgm" record -q -o "$work/p$kb.eacgm.db" -- \
    "$py" "${train[@]}" --steps "$STEPS" --profile "$work/p$kb.json" --result "$work/r$kb.json" >/dev/null 2>&1
  if [ ! -f "$work/p$kb.json" ]; then echo "buffers $kb KB: the profiled training failed under eacgm record"; continue; fi
  read -r seen seen_per <<<"$(kernels "$work/p$kb.json")"
  ours=$(q "$work/p$kb.eacgm.db" "SELECT count(*) FROM gpu_activity WHERE kind = 'kernel'")
  notes=$(q "$work/p$kb.eacgm.db" "SELECT value FROM meta WHERE key = 'gputime_notes'" | tr '\n' ';')
  echo "buffers $kb KB: torch.profiler saw $seen kernels ($seen_per per step, $(( 100 * seen / alone ))% of alone); eacgm's gpu_activity $ours kernels; notes: $notes"
done
# what each size costs the training without the profiler (steps/s; one run each)
"$py" "${train[@]}" --seconds "$COST_SECONDS" --result "$work/u.json" >/dev/null 2>&1
echo "cost: untraced $("$py" -c "import json; print(round(json.load(open('$work/u.json'))['steps_per_s'], 1))") steps/s"
for kb in $SIZES; do
  EACGM_GPUTIME_BUFFER_KB=$kb "$eacgm" record -q -o "$work/c$kb.eacgm.db" -- \
    "$py" "${train[@]}" --seconds "$COST_SECONDS" --result "$work/c$kb.json" >/dev/null 2>&1
  rows=$(q "$work/c$kb.eacgm.db" "SELECT count(*) FROM gpu_activity WHERE kind = 'kernel'")
  notes=$(q "$work/c$kb.eacgm.db" "SELECT value FROM meta WHERE key = 'gputime_notes'" | tr '\n' ';')
  echo "cost: buffers $kb KB, eacgm record: $("$py" -c "import json; print(round(json.load(open('$work/c$kb.json'))['steps_per_s'], 1))" 2>/dev/null || echo '?') steps/s, $rows kernels recorded; notes: $notes"
done
