#!/usr/bin/env bash
# Issue 32's ratios measured inside one training process: what plain `eacgm record -p` and
# plain `eacgm agent` add to the GPT training thread's CPU per step, and what cProfile adds,
# each against the untraced phases of the same process just before and after it.
#
#   CYCLES=10 ON_S=5 OFF_S=5 bench/step_cost_ab.sh
#   BASELINE=/tmp/eacgm-old CYCLES=10 bench/step_cost_ab.sh   # also an earlier build's record and agent
#   EXTRA="--sample-hz 0;--layers torch --sample-hz 0" TRAPS=1 bench/step_cost_ab.sh
#   AGENTS="--call-duty 1s/10s" ON_S=10 CPROFILE=0 bench/step_cost_ab.sh   # the agent duty-cycled too
#
# Why: bench/step_cost.sh compares separate runs, and here the same untraced training moves
# 10-15% from one run to the next and over a minute within one run, which buries a 2-3% effect
# under 5+ rounds. This script runs one training (bench/step_stalls.py, the same GPT step,
# OPENBLAS_NUM_THREADS=1) and cycles it through phases: untraced, record, untraced, agent,
# untraced, cProfile, untraced, ... (each traced phase ON_S seconds once its tracer is attached,
# each untraced one OFF_S seconds), then bench/phase_ratios.py gives each configuration the
# median over cycles of its phase's CPU per step over its two untraced neighbours'. record
# attaches with -p (the same probes as `record -- CMD`; its recording's first operator with a
# Python stack says when); the agent's phase starts a second after its /metrics counts the
# training's first operator; cProfile is switched on and off in the training by signals.
# EXTRA adds record configurations (';'-separated argument lists), each a phase of its own in
# every cycle. TRAPS=1 adds a phase where plain record traces another process that imports
# PyTorch and sleeps: eacgm's uprobes sit on libtorch for every process, so the training's
# operators still trap, but their programs stop at their first lookup (the thread is not
# traced): what the traps alone cost, against the record phase's traps and programs.
# AGENTS adds agent configurations the same way (with --call-duty, give ON_S a whole number of
# its periods: the phase starts in an on phase). AGENT=0 and CPROFILE=0 leave those phases out
# (more cycles of the record configurations in the same time).
# The training runs with glibc's malloc thresholds fixed (MALLOC_TUNABLES, '' for glibc's
# defaults): with its dynamic ones, PyTorch's freed tensors go back to the kernel and come back
# as page faults, 11,000-21,000 a second in this VM, a share of the step that moves by several
# percent from one run to the next; fixed, ~4 a second. Every configuration gets the same
# training, so this takes noise out, not cost: what the tracers add is then a share of a
# slightly shorter step.
# Run as root after scripts/build.sh; about (ON_S + OFF_S + 2) * 3 * CYCLES seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
EACGM=${EACGM:-build/eacgm}
PY=/usr/bin/python3
CYCLES=${CYCLES:-10}
ON_S=${ON_S:-5}
OFF_S=${OFF_S:-5}
BASELINE=${BASELINE:-}
EXTRA=${EXTRA:-}
AGENTS=${AGENTS:-}
TRAPS=${TRAPS:-0}
AGENT=${AGENT:-1}
CPROFILE=${CPROFILE:-1}
PORT=${PORT:-19479}
MALLOC_TUNABLES=${MALLOC_TUNABLES-glibc.malloc.trim_threshold=1073741824:glibc.malloc.mmap_threshold=33554432}
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
[[ $CYCLES =~ ^[1-9][0-9]*$ ]] || { echo "CYCLES must be a positive whole number, not '$CYCLES'"; exit 2; }
for v in ON_S OFF_S; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "$v must be a whole number of seconds, not '${!v}'"; exit 2; }
done
for v in TRAPS AGENT CPROFILE; do
  [[ ${!v} =~ ^[01]$ ]] || { echo "$v is 0 or 1, not '${!v}'"; exit 2; }
done
$PY -c "import torch" 2>/dev/null || { echo "python3-torch is not installed (scripts/setup.sh)"; exit 1; }
[ -x "$EACGM" ] || { echo "no $EACGM: run scripts/build.sh first"; exit 1; }
[ -z "$BASELINE" ] || [ -x "$BASELINE" ] || { echo "BASELINE=$BASELINE is not an executable"; exit 1; }
out=$(mktemp -d)
train="" tracer="" idle=""
cleanup() {
  # errexit off: a process killed here waits with a non-zero status, which would end the
  # cleanup there, leaving the rest running and the scratch folder behind
  set +e
  [ -n "$tracer" ] && kill -INT "$tracer" 2>/dev/null && wait "$tracer" 2>/dev/null
  [ -n "$idle" ] && kill -TERM "$idle" 2>/dev/null && wait "$idle" 2>/dev/null
  [ -n "$train" ] && kill -TERM "$train" 2>/dev/null && wait "$train" 2>/dev/null
  rm -rf "$out"
}
trap cleanup EXIT
mono() { $PY -S -c 'import time; print(time.monotonic_ns())'; }

# (a day at most; stopped with SIGTERM, when it writes its steps)
GLIBC_TUNABLES=$MALLOC_TUNABLES $PY bench/step_stalls.py 86400 "$out/steps.json" 20 >"$out/train.out" 2>&1 &
train=$!
for _ in $(seq 600); do grep -qx warm "$out/train.out" && break; sleep 0.1; done
grep -qx warm "$out/train.out" || { echo "the training printed no 'warm' in 60 s:"; cat "$out/train.out"; exit 1; }
: >"$out/phases"

off() {
  local s
  s=$(($(mono) + 500000000))
  sleep "$OFF_S.5"
  echo "off $s $(mono)" >>"$out/phases"
}
phase_record() {  # NAME BINARY N [PID [RECORD ARGUMENTS...]]
  local name=$1 bin=$2 n=$3 pid=${4:-$train}
  shift 4 || shift $#
  # shellcheck disable=SC2086
  "$bin" record -q -f -o "$out/r$n.db" "$@" -p "$pid" >>"$out/tracer.log" 2>&1 &
  tracer=$!
  sleep $((ON_S + 1))
  local e
  e=$(mono)
  kill -INT "$tracer"
  wait "$tracer" || { echo "$name -p failed:"; tail -5 "$out/tracer.log"; exit 1; }
  tracer=""
  # attached once its first operator (with a Python stack, where the layer is on) is recorded;
  # 0.3 s later, to be sure. Tracing the idle process: 1 s after the start (attaching takes
  # ~0.1 s here)
  local s db=$out/r$n.db
  if [ "$pid" = "$train" ]; then
    s=$(sqlite3 "$db" "select max((select min(ts_ns) from torch_calls),
        coalesce((select min(ts_ns) from torch_calls where py_stack is not null), 0)) + 300000000")
    [ -n "$s" ] || { echo "$name -p recorded no operator of the training"; exit 1; }
  else
    s=$(sqlite3 "$db" "select value + 1000000000 from meta where key = 'start_monotonic_ns'")
  fi
  echo "$name $s $e" >>"$out/phases"
  rm -f "$db"
}
phase_agent() {  # NAME BINARY [ARG...]
  local name=$1 binary=$2
  shift 2
  "$binary" agent -q --listen 127.0.0.1:$PORT --state-dir "$out/state" "$@" >>"$out/tracer.log" 2>&1 &
  tracer=$!
  local ok=""
  for _ in $(seq 150); do
    # (grep reads all of it: grep -q would stop at the match, and under pipefail curl's
    # failed write past it would read as no match)
    if curl -sf 127.0.0.1:$PORT/metrics 2>/dev/null | grep '^eacgm_calls_total{.*layer="torch"' >/dev/null; then
      ok=1
      break
    fi
    kill -0 "$tracer" 2>/dev/null || break
    sleep 0.2
  done
  [ -n "$ok" ] || { echo "$name counted no operator of the training in 30 s:"; tail -5 "$out/tracer.log"; exit 1; }
  local s e
  s=$(($(mono) + 1000000000))
  sleep $((ON_S + 1))
  e=$(mono)
  kill -INT "$tracer"
  wait "$tracer" 2>/dev/null || true
  tracer=""
  echo "$name $s $e" >>"$out/phases"
}
phase_cprofile() {
  kill -USR1 "$train"
  local s e
  s=$(($(mono) + 200000000))
  sleep "$ON_S.2"
  e=$(mono)
  kill -USR2 "$train"
  echo "cprofile $s $e" >>"$out/phases"
}

if [ "$TRAPS" = 1 ]; then
  $PY -c 'import torch, time, sys; print("ready", flush=True); time.sleep(1e6)' >"$out/idle.out" 2>&1 &
  idle=$!
  for _ in $(seq 300); do grep -qx ready "$out/idle.out" && break; sleep 0.1; done
  grep -qx ready "$out/idle.out" || { echo "the idle PyTorch process did not start:"; cat "$out/idle.out"; exit 1; }
fi
IFS=';' read -r -a extra <<<"$EXTRA"
IFS=';' read -r -a agents <<<"$AGENTS"

off
for c in $(seq "$CYCLES"); do
  phase_record record "$EACGM" "$c"
  off
  if [ "$TRAPS" = 1 ]; then
    phase_record "traps only" "$EACGM" "t$c" "$idle"
    off
  fi
  for i in "${!extra[@]}"; do
    # shellcheck disable=SC2086
    phase_record "record ${extra[$i]}" "$EACGM" "x$i-$c" "$train" ${extra[$i]}
    off
  done
  if [ "$AGENT" = 1 ]; then
    phase_agent agent "$EACGM"
    off
  fi
  for i in "${!agents[@]}"; do
    # shellcheck disable=SC2086
    phase_agent "agent ${agents[$i]}" "$EACGM" ${agents[$i]}
    off
  done
  if [ "$CPROFILE" = 1 ]; then
    phase_cprofile
    off
  fi
  if [ -n "$BASELINE" ]; then
    phase_record "baseline record" "$BASELINE" "b$c"
    off
    phase_agent "baseline agent" "$BASELINE"
    off
  fi
  echo "cycle $c of $CYCLES done" >&2
done
kill -TERM "$train"
wait "$train"
train=""
echo "training: bench/step_stalls.py (the GPT step of train_steps.py gpt, OPENBLAS_NUM_THREADS=$OPENBLAS_NUM_THREADS, GLIBC_TUNABLES=$MALLOC_TUNABLES), $CYCLES cycles, ON_S=$ON_S OFF_S=$OFF_S"
$PY bench/phase_ratios.py "$out/steps.json" "$out/phases"
