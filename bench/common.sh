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
