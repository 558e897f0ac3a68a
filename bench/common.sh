# Helpers the benchmark scripts share (sourced, not run).

# value KEY: the number after "KEY=" in the input
value() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p"; }

# best_of KEY CMD...: runs CMD 3 times, prints the lowest KEY value it printed
best_of() {
  local key=$1 best="" v
  shift
  for _ in 1 2 3; do
    v=$("$@" | value "$key")
    best=$(awk -v a="$v" -v b="$best" 'BEGIN{print (b=="" || a<b) ? a : b}')
  done
  echo "$best"
}

# For the training-loop benchmarks (bench/train_steps.py prints steps_per_s=X cpu_ms_per_step=Y):
# keep NAME OUTPUT keeps the highest rate per configuration in best[NAME] and every run's CPU per
# step in cpus[NAME] (the caller declares: declare -A best cpus); median reads numbers, one per
# word, and prints their median.
rate() { value steps_per_s; }
cpu() { value cpu_ms_per_step; }
keep() {
  local cur=${best[$1]:-0} r c
  r=$(rate <<<"$2"); c=$(cpu <<<"$2")
  best[$1]=$(awk -v a="$r" -v b="$cur" 'BEGIN{print (a>b)?a:b}')
  cpus[$1]="${cpus[$1]:-} $c"
}
median() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

# cuda_python NAME: the first of $PYTHON (else python3, /usr/bin/python3) whose PyTorch sees a
# GPU, its path on stdout; else says so as NAME and fails (the GPU benchmarks need one)
cuda_python() {
  local cand
  for cand in ${PYTHON:-python3 /usr/bin/python3}; do
    if command -v "$cand" >/dev/null &&
      "$cand" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
      command -v "$cand"
      return 0
    fi
  done
  echo "$1: no python3 with PyTorch that sees a GPU (set PYTHON)" >&2
  return 1
}

# scratch_with_cleanup: a scratch folder in $out, removed at exit, and the processes whose pids
# the caller keeps in $pids stopped (SIGINT) and waited for first: nothing launched is left
# running
scratch_with_cleanup() {
  out=$(mktemp -d)
  pids=()
  trap stop_launched EXIT
}
stop_launched() {
  for p in "${pids[@]}"; do kill -INT "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$out"
}

# hold_python_probe EACGM DIR BASE_NS: starts a recording (pid in $hold; the caller stops it)
# whose python layer probes the 3.10 interpreter $PY310, so that every call of that interpreter
# traps, in any process; returns once a call loop outside the recording shows the probe (more
# than BASE_NS + 100 ns a call), which can take seconds after the programs load (the layer is
# attached when the recording sees its interpreter). Fails after 20 s.
hold_python_probe() {
  "$1" record -q -f -o "$2/hold.db" --python-calls '*' -- "$PY310" -c 'import time; time.sleep(90)' \
    >/dev/null 2>&1 &
  hold=$!
  local v
  for _ in $(seq 40); do
    v=$("$PY310" bench/python_call_loop.py 200000 | value ns_per_call)
    awk -v v="$v" -v b="$3" 'BEGIN { exit !(v > b + 100) }' && return 0
    kill -0 "$hold" 2>/dev/null || break
    sleep 0.5
  done
  echo "the python probe on $PY310 did not show in 20 s: traps not measured" >&2
  return 1
}
