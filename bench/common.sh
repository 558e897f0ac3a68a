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
