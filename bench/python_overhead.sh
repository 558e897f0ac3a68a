#!/usr/bin/env bash
# Per-call cost of the python layer, measured in one run against no tracing: a call-heavy loop
# on each supported interpreter here (every call recorded, and every call filtered out, which
# leaves the probe hit and, on 3.11+, the un-inlined call), then a small PyTorch training loop.
# Run as root after `cmake --build build --target eacgm`.
set -euo pipefail
cd "$(dirname "$0")/.."
EACGM=build/eacgm
N=${N:-1000000}
STEPS=${STEPS:-300}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

source bench/common.sh
traced() { $EACGM record -q -f -o "$out/r.db" --layers python "$@"; }  # [--python-calls P] -- CMD
ratio() {  # NAME OURS BASE UNIT
  awk -v n="$1" -v o="$2" -v b="$3" -v u="$4" \
    'BEGIN { printf "%s: ours %.4g %s, baseline (untraced) %.4g %s, ratio %.2f\n", n, o, u, b, u, o / b }'
}

for py in /usr/bin/python3.11 /root/.pyenv/versions/3.10.13/bin/python3.10 \
          /root/.pyenv/versions/3.12.1/bin/python3.12 /root/.pyenv/versions/3.13.0/bin/python3.13; do
  [ -x "$py" ] || { echo "$py: not installed, skipped"; continue; }
  v=$($py -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  base=$(best_of ns_per_call $py bench/python_call_loop.py "$N")
  all=$(best_of ns_per_call traced --python-calls user -- $py bench/python_call_loop.py "$N")
  calls=$(sqlite3 "$out/r.db" "select count(*) from python_calls where name like '%.tiny'")
  none=$(best_of ns_per_call traced --python-calls 'no.such.module' -- $py bench/python_call_loop.py "$N")
  ratio "python $v call loop, every call recorded ($calls recorded)" "$all" "$base" ns/call
  ratio "python $v call loop, every call filtered out" "$none" "$base" ns/call
done

if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  base=$(best_of ms_per_step /usr/bin/python3 bench/python_train_loop.py "$STEPS")
  dflt=$(best_of ms_per_step traced --python-calls 'user,torch.nn,-torch.nn.modules.module.Module._*' \
         -- /usr/bin/python3 bench/python_train_loop.py "$STEPS")
  calls=$(sqlite3 "$out/r.db" "select count(*) from python_calls")
  ratio "torch MLP training step, calls of user code + torch.nn ($calls calls recorded)" \
    "$dflt" "$base" ms/step
  stacks=$(best_of ms_per_step traced -- /usr/bin/python3 bench/python_train_loop.py "$STEPS")
  ratio "torch MLP training step, --layers python (stacks and profile, no per-call timing)" \
    "$stacks" "$base" ms/step
else
  echo "torch training loop: /usr/bin/python3 has no torch, skipped"
fi
