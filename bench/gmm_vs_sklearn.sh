#!/usr/bin/env bash
# GMM fit time and log-likelihood: `eacgm gmm fit` against scikit-learn's GaussianMixture, in one
# run, 2 threads each, same settings and k-means++ seeding (see bench/README.md).
# Usage: bench/gmm_vs_sklearn.sh [BUILD_DIR]   (QUICK=1 for N = 20k and 100k instead of 100k and 1M;
# REPEAT=3 to keep each side's fastest of 3 fits on a busy machine)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
eacgm=$build/eacgm
python=${PYTHON:-/usr/bin/python3}  # Debian's python3: the one python3-sklearn installs into
[ -x "$eacgm" ] || { echo "gmm_vs_sklearn: $eacgm not found (build it: cmake --build $build --target eacgm)" >&2; exit 1; }
"$python" -c "import sklearn" 2>/dev/null || { echo "gmm_vs_sklearn: $python has no sklearn (apt-get install python3-sklearn)" >&2; exit 1; }

if [ "${QUICK:-0}" = 1 ]; then sizes=(20000 100000); else sizes=(100000 1000000); fi
dims=(8 16)
components=(4 8)
settings=(--n-init "${N_INIT:-3}" --max-iter "${MAX_ITER:-100}" --tol "${TOL:-1e-3}" --reg-covar "${REG_COVAR:-1e-6}" --seed 0)
data_dir=${DATA_DIR:-${TMPDIR:-/tmp}/eacgm-gmm-bench}
mkdir -p "$data_dir"
export OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 MKL_NUM_THREADS=2

blas=$("$python" -c "import numpy, threadpoolctl; print(','.join(sorted({i['internal_api'] for i in threadpoolctl.threadpool_info() if i['user_api'] == 'blas'})) or 'unknown')" 2>/dev/null || echo unknown)
echo "# $(nproc) cores; sklearn $("$python" -c 'import sklearn; print(sklearn.__version__)') with BLAS: $blas; settings: ${settings[*]}, covariance full"

field() { "$python" -c "import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])" "$1" "$2"; }

for n in "${sizes[@]}"; do
  for d in "${dims[@]}"; do
    for k in "${components[@]}"; do
      data=$data_dir/n${n}_d${d}_k${k}.csv
      # The true mixture has K components: the fit looks for the structure that is there.
      [ -s "$data" ] || "$python" "$here/gmm_make_data.py" -n "$n" -d "$d" -k "$k" --seed 1 -o "$data"
      # REPEAT=R alternates the two R times and keeps each side's fastest fit (for shared machines).
      ours=() theirs=()
      for _ in $(seq "${REPEAT:-1}"); do
        ours+=("$("$eacgm" gmm fit "$data" -k "$k" --covariance full "${settings[@]}")")
        theirs+=("$("$python" "$here/gmm_sklearn_fit.py" "$data" -k "$k" --covariance full "${settings[@]}")")
      done
      "$python" - "$n" "$d" "$k" "$(printf '%s\n' "${ours[@]}")" "$(printf '%s\n' "${theirs[@]}")" <<'PY'
import json, sys
n, d, k = sys.argv[1:4]
fastest = lambda runs: min((json.loads(r) for r in runs.splitlines()), key=lambda j: j["fit_seconds"])
o, s = fastest(sys.argv[4]), fastest(sys.argv[5])
x, y = o["fit_seconds"], s["fit_seconds"]
a, b = o["mean_log_likelihood"], s["mean_log_likelihood"]
verdict = "ll equal or better" if a >= b - 1e-3 * abs(b) else "ll WORSE"
print(f"gmm fit N={n} d={d} K={k}: ours {x:.3f} s (ll {a:.6f}, {o['n_iter']} iter), "
      f"baseline sklearn {y:.3f} s (ll {b:.6f}, {s['n_iter']} iter), ratio {y / x:.1f} ({verdict})")
PY
    done
  done
done
