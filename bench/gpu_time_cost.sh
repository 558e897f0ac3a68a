#!/usr/bin/env bash
# What GPU-side time through CUPTI's Activity API costs a GPU training (issue 36), on a machine
# with a GPU: the GPU check's tiny GPT (scripts/gpu_check/train.py) untraced (the baseline),
# then with scripts/gpu_check/cupti_probe.cpp injected (CUDA_INJECTION64_PATH) recording
#   kernels-quiet  concurrent-kernel records, counted and not written (CUPTI's own cost)
#   kernels        the same, each written as a text line (the cost of handling them)
#   kernels+launch the same, and the runtime's kernel-launch API records only (each launch's
#                  correlation id and thread: the cheapest link to eacgm's launch rows)
#   kernels-duty10 kernels written, activity on for 100 ms of every 1000 ms (a duty cycle)
#   all            kernels, copies and memsets, written (what the GPU check's step 7 records)
#   all+api        and the runtime and driver API records (correlation to the launching thread)
#   eacgm-full     eacgm's own library (eacgm gputime-library), EACGM_GPUTIME_DUTY=full: what
#                  `eacgm record -- CMD` gives its command (no eacgm attached: CUPTI and packing)
#   eacgm-duty     the same at 1s/10s, the default of jobs eacgm does not launch (the agent's)
# ROUNDS rounds (default 2), interleaved, DURATION seconds each (default 8); prints steps/s per run and
# each variant's median against the untraced median of the same run, and the added time per
# kernel. VARIANTS picks some (untraced first). Needs nvcc and a python3 with CUDA PyTorch (PYTHON); run from the repository.
set -uo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-2} SECONDS_EACH=${DURATION:-8}
. bench/common.sh
py=$(cuda_python gpu_time_cost.sh) || exit 2
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
cuda_home="$(cd "$(dirname "$(readlink -f "$nvcc")")/.." && pwd)"
work=$(mktemp -d /tmp/eacgm-gpu-time-cost.XXXXXX)
trap 'rm -rf "$work"' EXIT
"$nvcc" -O2 -std=c++20 -shared -Xcompiler -fPIC -I"$cuda_home/include" -I"$cuda_home/extras/CUPTI/include" -Isrc \
  -o "$work/probe.so" scripts/gpu_check/cupti_probe.cpp -ldl || exit 2
"${EACGM:-build/eacgm}" gputime-library "$work" >/dev/null 2>&1 || echo "gpu_time_cost.sh: no eacgm library (build first, or set EACGM): eacgm-* variants will fail" >&2

run() {  # run VARIANT ROUND: one training, its steps/s on stdout
  local v="$1" r="$2" env=()
  case "$v" in
    untraced) ;;
    kernels-quiet) env=(EACGM_CUPTI_KERNELS_ONLY=1 EACGM_CUPTI_QUIET=1) ;;
    kernels) env=(EACGM_CUPTI_KERNELS_ONLY=1) ;;
    kernels+launch) env=(EACGM_CUPTI_KERNELS_ONLY=1 EACGM_CUPTI_API=launch) ;;
    kernels-duty10) env=(EACGM_CUPTI_KERNELS_ONLY=1 EACGM_CUPTI_DUTY=100/1000) ;;
    all) env=() ;;
    all+api) env=(EACGM_CUPTI_API=1) ;;
    eacgm-full) env=(EACGM_GPUTIME_DUTY=full) ;;
    eacgm-duty) env=(EACGM_GPUTIME_DUTY=1s/10s) ;;
  esac
  case "$v" in
    untraced) ;;
    eacgm-*) env+=(CUDA_INJECTION64_PATH="$work/libeacgm_cupti.so") ;;
    *) env+=(CUDA_INJECTION64_PATH="$work/probe.so" EACGM_CUPTI_OUT="$work/$v.$r") ;;
  esac
  env "${env[@]}" "$py" scripts/gpu_check/train.py --device cuda --seconds "$SECONDS_EACH" \
    --result "$work/$v.$r.json" >/dev/null 2>&1
  "$py" -c "import json,sys; print(json.load(open(sys.argv[1]))['steps_per_s'])" "$work/$v.$r.json" 2>/dev/null || echo nan
  # What the probe recorded (its totals line), and its errors, to stderr
  cat "$work/$v.$r".*.tsv 2>/dev/null | grep -E '^E (done|duty|cuptiActivity|dropped)' | sed "s/^E /  $v: /" >&2
  rm -f "$work/$v.$r".*.tsv
}
variants=(${VARIANTS:-untraced kernels-quiet kernels kernels+launch kernels-duty10 all all+api eacgm-full eacgm-duty})
declare -A got
for r in $(seq "$ROUNDS"); do
  for v in "${variants[@]}"; do
    got[$v]+="$(run "$v" "$r") "
    echo "round $r $v: $(echo "${got[$v]}" | awk '{print $NF}') steps/s" >&2
  done
done
kernels_per_step=$(EACGM_CUPTI_KERNELS_ONLY=1 CUDA_INJECTION64_PATH="$work/probe.so" EACGM_CUPTI_QUIET=1 \
  EACGM_CUPTI_OUT="$work/count" "$py" scripts/gpu_check/train.py --device cuda --steps 200 \
  --result "$work/count.json" >/dev/null 2>&1; "$py" - "$work" <<'EOF'
import glob, json, re, sys
w = sys.argv[1]
steps = json.load(open(f"{w}/count.json"))["steps"]
k = sum(int(m.group(1)) for f in glob.glob(f"{w}/count.*.tsv")
        for m in re.finditer(r"done: (\d+) kernels", open(f).read()))
print(f"{k / steps:.1f}")
EOF
)
echo "GPU time's cost, the tiny GPT on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $ROUNDS rounds of ${SECONDS_EACH} s; ${kernels_per_step} kernels per step"
for v in "${variants[@]}"; do echo "$v ${got[$v]}"; done | awk -v kps="$kernels_per_step" '
  function median(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
  { n = split(substr($0, length($1) + 2), xs, " "); m = median(xs, n); med[NR] = m; name[NR] = $1 }
  END { base = med[1]
    for (i = 1; i <= NR; i++) {
      if (i == 1) { printf "  %-14s %7.1f steps/s (baseline)\n", name[i], med[i]; continue }
      added_us = (1e6 / med[i] - 1e6 / base)
      printf "  %-14s %7.1f steps/s  %+5.1f%% slower, +%.0f us per step, %.2f us per kernel\n", name[i], med[i],
             100 * (1 - med[i] / base), added_us, (kps > 0 ? added_us / kps : 0) } }'
