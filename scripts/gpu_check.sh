#!/usr/bin/env bash
# The GPU check: eacgm's whole stack on a real GPU, in one prepared command of at most 8 minutes,
# from the release tarball (dist/, scripts/build.sh --release) so that it runs on the GPU
# machine's own userland. It writes one text report and the recordings to OUT:
#   1. the machine: kernel, nvidia-smi, driver, Python/PyTorch/NCCL versions, eacgm doctor
#   2. a CUDA C program built here with nvcc (known kernels, copies and bytes), recorded with
#      plain `eacgm record`: counts, kernel names and bytes against the program's own
#   3. a small GPT training on the GPU recorded with defaults, under torch.profiler: layers,
#      operators, Python stacks, kernel names and counts against the profiler's account of the
#      same steps without eacgm (a run of its own: two CUPTI clients in one process may lose
#      each other's records, which is itself checked); NVML readings against nvidia-smi
#      --query-gpu taken at the same time
#   4. NCCL through torch.distributed (world size 1): communicator, rank, bytes
#   5. eacgm agent for 30 s beside the training (given the injection library by gputime-library):
#      /metrics' DCGM_FI_DEV_*, call counters and GPU kernel seconds
#   6. cost: training steps/s untraced, under plain `eacgm record` (and without its gputime
#      layer, and with it duty-cycled as jobs eacgm does not launch get it), under torch.profiler
#   7. GPU-side time of the training (issue 36): the gputime layer's kernels under plain `eacgm
#      record`, per name and per step, against torch.profiler's account of the same steps
#      without eacgm (step 3's), each linked to its launch, its cuda_calls row and Python stack
#      (the CUDA program's kernels against its cudaEvents are step 2's)
# Where the kernel refuses BPF, it says so and goes on with what needs none.
#
# usage: scripts/gpu_check.sh [--dry-run] [--out DIR] [--budget SECONDS]
#   --dry-run   run every step this machine can (the toolkit's stub libcuda, CPU PyTorch):
#               what CI runs, so that a script error never costs GPU time
#   --out DIR   where the report and recordings go (default: $OUT, else gpu-check-output)
#   --budget S  stop starting steps after S seconds (default 450; the device call's limit is 600)
#   --only N,M  run only these steps (2-7) after step 1 (to rerun one on a GPU for its fix)
# Environment: EACGM (a binary to use instead of the tarball's), PYTHON (default: the first of
# python3, /usr/bin/python3 that imports torch), NVCC (default: nvcc, /usr/local/cuda/bin/nvcc),
# GPU_CHECK_AS_IF_NO_BPF=1 (take BPF as refused, to try that path here).
# Exit status: 0 when every check passed or could not apply here ("n/a"), 1 when one failed,
# 2 when the check itself could not start.
set -uo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"

dry=0 out="${OUT:-gpu-check-output}" budget=450 only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry=1; shift ;;
    --out) out="${2:?--out needs a folder}"; shift 2 ;;
    --budget) budget="${2:?--budget needs seconds}"; shift 2 ;;
    --only) only="${2:?--only needs step numbers, e.g. 2,7}"; shift 2 ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case "$budget" in ''|*[!0-9]*) echo "gpu_check.sh: --budget wants whole seconds, not '$budget'" >&2; exit 2 ;; esac
case "$only" in *[!0-9,]*) echo "gpu_check.sh: --only wants step numbers such as 2,7, not '$only'" >&2; exit 2 ;; esac
want() { [ -z "$only" ] || [[ ",$only," == *",$1,"* ]]; }
mkdir -p "$out" || exit 2
out="$(cd "$out" && pwd)"
work="$(mktemp -d /tmp/eacgm-gpu-check.XXXXXX)" || exit 2
report="$out/report.txt"
: >"$report"
t0=$(date +%s)
failed=0
children=()
cleanup() {
  for p in "${children[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
trap 'echo "gpu_check.sh: interrupted" | tee -a "$report"; exit 130' INT TERM

say() { echo "$@" | tee -a "$report"; }
section() { say ""; say "== $* ($(( $(date +%s) - t0 )) s)"; }
left() { echo $(( budget - ($(date +%s) - t0) )); }
# run with a time limit of at most the budget left; its output goes to the report
bounded() {
  local limit="$1"; shift
  local l; l=$(left)
  [ "$l" -lt "$limit" ] && limit="$l"
  if [ "$limit" -le 5 ]; then say "  skipped: the budget ($budget s) is spent"; return 124; fi
  timeout -k 5 "$limit" "$@"
}
judge() {  # compare.py's lines into the report; a FAIL marks the run failed
  "$py" "$root/scripts/gpu_check/compare.py" "$@" 2>&1 | tee -a "$report"
  [ "${PIPESTATUS[0]}" = 0 ] || failed=1
}
keep() {  # a recording goes to OUT when under 16 MB, gzipped when that makes it fit; else
  local f="$1" size  # it stays out (and the report says so)
  [ -f "$f" ] || return 0
  size=$(stat -c %s "$f")
  if [ "$size" -lt $((16 * 1024 * 1024)) ]; then cp "$f" "$out/"; return 0; fi
  gzip -c "$f" >"$out/$(basename "$f").gz"
  if [ "$(stat -c %s "$out/$(basename "$f").gz")" -ge $((16 * 1024 * 1024)) ]; then
    rm -f "$out/$(basename "$f").gz"
    say "  $(basename "$f") is $((size / 1024 / 1024)) MiB: not kept (over 16 MB gzipped)"
  fi
}

# --- the binary: the release tarball's, unpacked here
if [ -n "${EACGM:-}" ]; then
  eacgm="$EACGM"
else
  tarball=$(ls -t dist/eacgm-*-linux-x86_64.tar.gz 2>/dev/null | head -1)
  if [ -n "$tarball" ]; then
    tar -xzf "$tarball" -C "$work" && eacgm=$(ls "$work"/eacgm-*/bin/eacgm | head -1)
  elif [ "$dry" = 1 ] && [ -x build/eacgm ]; then
    eacgm="$root/build/eacgm"  # the dry run in CI checks the script with the development build
  else
    echo "gpu_check.sh: no dist/eacgm-*-linux-x86_64.tar.gz: run scripts/build.sh --release first" >&2
    exit 2
  fi
fi
[ -x "${eacgm:-}" ] || { echo "gpu_check.sh: no eacgm binary to run" >&2; exit 2; }

# --- Python with PyTorch, nvcc
py=""
for cand in ${PYTHON:-python3 /usr/bin/python3}; do
  if command -v "$cand" >/dev/null && "$cand" -c "import torch" 2>/dev/null; then py="$(command -v "$cand")"; break; fi
done
[ -n "$py" ] || { echo "gpu_check.sh: no python3 that imports torch (set PYTHON)" >&2; exit 2; }
nvcc="${NVCC:-}"
[ -n "$nvcc" ] || nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)

section "1. the machine"
say "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  mode: $([ "$dry" = 1 ] && echo 'dry run (no GPU expected)' || echo 'GPU check')"
say "kernel: $(uname -r)  $(uname -m)"
say "eacgm: $eacgm ($("$eacgm" --version 2>&1))"
if command -v nvidia-smi >/dev/null; then
  bounded 20 nvidia-smi 2>&1 | tee -a "$report"
  say "driver: $(nvidia-smi --query-gpu=driver_version,name --format=csv,noheader 2>&1 | head -1)"
else
  say "nvidia-smi: not found"
fi
bounded 60 "$py" - <<'EOF' 2>&1 | tee -a "$report"
import sys, torch
print(f"python {sys.version.split()[0]} ({sys.executable}); torch {torch.__version__}, "
      f"built for CUDA {torch.version.cuda}; cuda available: {torch.cuda.is_available()}")
if torch.cuda.is_available():
    print(f"GPU: {torch.cuda.get_device_name(0)} x{torch.cuda.device_count()}; "
          f"NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}")
EOF
device=cpu
if [ "$dry" = 0 ] && "$py" -c "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  device=cuda
fi
say "nvcc: $nvcc ($("$nvcc" --version 2>/dev/null | tail -1 || echo 'not found'))"
say "eacgm doctor:"
bounded 60 "$eacgm" doctor >"$work/doctor.txt" 2>&1
doctor_rc=$?
sed 's/^/  /' "$work/doctor.txt" | tee -a "$report"
bpf=1
if [ "$doctor_rc" != 0 ]; then
  bpf=0
  say "BPF: refused here (doctor above): the recording steps run with --layers gpu only, or not at all"
fi
if [ "${GPU_CHECK_AS_IF_NO_BPF:-0}" = 1 ] && [ "$bpf" = 1 ]; then
  bpf=0  # to try the path of a kernel that refuses BPF (gVisor) on one that does not
  say "BPF: taken as refused (GPU_CHECK_AS_IF_NO_BPF=1)"
fi
if [ "$dry" = 0 ] && [ "$device" = cpu ]; then
  say "FAIL: not a dry run, but PyTorch sees no GPU"
  failed=1
fi

# traced DB: sets TRACE to the words that run a command under plain `eacgm record -o DB` where
# BPF works; where the kernel refuses it, to nothing, so the command runs alone (eacgm records
# nothing without BPF, not even the gpu layer; the workloads' own measurements still go in the
# report)
traced() {
  TRACE=()
  if [ "$bpf" = 1 ]; then TRACE=("$eacgm" record -o "$1" --); fi
}
# judge_recording KIND DB ARGS...: compare.py on a recording, or n/a where none could be made
judge_recording() {
  if [ "$bpf" = 1 ]; then judge "$@"; else
    say "  n/a   $1: not recorded (this kernel refuses BPF; see doctor above)"
  fi
}

# the CUDA program (steps 2 and 7), built once with nvcc
build_known_work() {
  [ -x "$work/known_work" ] && return 0
  bounded 120 "$nvcc" -O2 -cudart shared -o "$work/known_work" "$root/scripts/gpu_check/known_work.cu" \
    >"$work/nvcc.txt" 2>&1 || return 1
  # (grep reads all of ldd's lines: with -q it could stop at the first, and under pipefail the
  # loader's SIGPIPE on the next one would read as "found")
  if ldd "$work/known_work" | grep "libcudart.*not found" >/dev/null; then
    # a pip-installed toolkit: its libcudart lives in the nvidia wheels
    lib=$("$py" -c "import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))" 2>/dev/null)
    dir=$(find "${lib:-/nonexistent}" -name 'libcudart.so*' -printf '%h\n' 2>/dev/null | head -1)
    [ -n "$dir" ] && export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    say "libcudart: from $dir"
  fi
}

if want 2; then
section "2. a CUDA C program with known kernels, copies and bytes, plain eacgm record"
if build_known_work; then
  rec="$work/known_work.eacgm.db"
  traced "$rec"
  bounded 90 "${TRACE[@]}" "$work/known_work" "$work/known_work.json" \
    >"$work/record_cuda.txt" 2>&1
  say "eacgm record: exit $?; $(grep -E '^layers|eacgm:' "$work/record_cuda.txt" | tail -3 | tr '\n' ' ')"
  if [ -f "$work/known_work.json" ]; then
    cp "$work/known_work.json" "$out/"
    judge_recording cuda "$rec" "$work/known_work.json"
  else
    say "  FAIL  the program wrote no known_work.json:"; sed 's/^/    /' "$work/record_cuda.txt" | tail -20 | tee -a "$report"; failed=1
  fi
  keep "$rec"
else
  say "  FAIL  nvcc could not build known_work.cu:"; tail -20 "$work/nvcc.txt" | tee -a "$report"; failed=1
fi
fi  # step 2

# torch.profiler's account of the training's steps with nothing of eacgm's in the process
# (steps 3 and 7): the reference that eacgm's recordings of the same steps are held to
steps=$([ "$device" = cuda ] && echo 300 || echo 20)
profile_alone() {
  [ -f "$work/profile_alone.json" ] && return 0
  bounded 120 "$py" "$root/scripts/gpu_check/train.py" --device "$device" --steps "$steps" \
    --profile "$work/profile_alone.json" --result "$work/train_alone.json" >"$work/alone.txt" 2>&1
  [ -f "$work/profile_alone.json" ] && cp "$work/profile_alone.json" "$out/" && return 0
  say "  FAIL  torch.profiler without eacgm wrote no profile:"; tail -20 "$work/alone.txt" | tee -a "$report"
  failed=1
  return 1
}

if want 3; then
section "3. a small GPT training ($device), plain eacgm record, under torch.profiler; NVML beside nvidia-smi"
profile_alone
smi_pid=""
if command -v nvidia-smi >/dev/null && [ "$device" = cuda ]; then
  nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used,power.draw,clocks.sm \
    --format=csv,nounits -lms 200 >"$work/smi.csv" 2>/dev/null &
  smi_pid=$!; children+=("$smi_pid")
fi
rec="$work/train.eacgm.db"
traced "$rec"
bounded 150 "${TRACE[@]}" "$py" "$root/scripts/gpu_check/train.py" \
  --device "$device" --steps "$steps" --profile "$work/profile.json" --result "$work/train.json" \
  >"$work/record_train.txt" 2>&1
say "eacgm record: exit $?; $(grep -E '^layers|eacgm:' "$work/record_train.txt" | tail -3 | tr '\n' ' ')"
[ -n "$smi_pid" ] && kill "$smi_pid" 2>/dev/null
if [ -f "$work/profile.json" ] && [ -f "$work/profile_alone.json" ]; then
  cp "$work/profile.json" "$work/train.json" "$out/" 2>/dev/null
  judge_recording train "$rec" "$work/profile.json" "$work/train.json" "$work/profile_alone.json"
  judge_recording nvml "$rec" "$([ -n "$smi_pid" ] && echo "$work/smi.csv" || echo -)"
  [ -n "$smi_pid" ] && cp "$work/smi.csv" "$out/"
elif [ ! -f "$work/profile.json" ]; then
  say "  FAIL  the training wrote no profile:"; tail -20 "$work/record_train.txt" | tee -a "$report"; failed=1
fi  # (no profile without eacgm: said above)
keep "$rec"
fi  # step 3

if want 4; then
section "4. torch.distributed ($([ "$device" = cuda ] && echo nccl || echo gloo) backend, world size 1), plain eacgm record"
backend=$([ "$device" = cuda ] && echo nccl || echo gloo)
rec="$work/dist.eacgm.db"
traced "$rec"
bounded 120 "${TRACE[@]}" "$py" "$root/scripts/gpu_check/train.py" \
  --device "$device" --steps 30 --dist "$backend" --result "$work/dist.json" >"$work/record_dist.txt" 2>&1
say "eacgm record: exit $?; $(grep -E '^layers|eacgm:' "$work/record_dist.txt" | tail -3 | tr '\n' ' ')"
if [ -f "$work/dist.json" ]; then
  judge_recording comm "$rec" "$work/dist.json"
else
  say "  FAIL  the training wrote no result:"; tail -20 "$work/record_dist.txt" | tee -a "$report"; failed=1
fi
keep "$rec"
fi  # step 4

if want 5; then
section "5. eacgm agent for 30 s beside the training"
if [ "$bpf" = 0 ]; then
  say "  n/a   agent: not run (this kernel refuses BPF; see doctor above)"
else
port=$("$py" -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])")
agent_seconds=$([ "$dry" = 1 ] && echo 12 || echo 30)
"$eacgm" agent --listen "127.0.0.1:$port" --state-dir "$work/agent" --allow-second-agent \
  >"$work/agent.txt" 2>&1 &
agent=$!; children+=("$agent")
sleep 3
# a job the agent did not launch gets GPU time through its own environment (gputime-library)
mkdir -p "$work/lib" && "$eacgm" gputime-library "$work/lib" >/dev/null 2>>"$work/agent.txt"
CUDA_INJECTION64_PATH="$work/lib/libeacgm_cupti.so" \
bounded $((agent_seconds + 30)) "$py" "$root/scripts/gpu_check/train.py" --device "$device" \
  --seconds "$agent_seconds" --result "$work/agent_train.json" >/dev/null 2>&1 &
trainer=$!; children+=("$trainer")
sleep $((agent_seconds - 4))
"$py" -c "import urllib.request,sys; sys.stdout.write(urllib.request.urlopen('http://127.0.0.1:$port/metrics', timeout=10).read().decode())" \
  >"$work/metrics.txt" 2>"$work/metrics.err"
wait "$trainer"
kill -TERM "$agent" 2>/dev/null; wait "$agent"
say "agent: exit $? after SIGTERM; its log:"; tail -8 "$work/agent.txt" | sed 's/^/  /' | tee -a "$report"
if [ -s "$work/metrics.txt" ]; then
  cp "$work/metrics.txt" "$out/"
  judge metrics "$work/metrics.txt" "$([ "$dry" = 1 ] && echo dry || echo gpu)"
else
  say "  FAIL  no /metrics answer: $(cat "$work/metrics.err")"; failed=1
fi
fi
fi  # step 5

if want 6; then
section "6. cost: training steps/s untraced, under plain eacgm record, under torch.profiler"
secs=$([ "$dry" = 1 ] && echo 5 || echo 15)
run_train() { bounded $((secs + 60)) "$@" --device "$device" --seconds "$secs" >/dev/null 2>&1; }
run_train "$py" "$root/scripts/gpu_check/train.py" --result "$work/cost_untraced.json"
[ "$bpf" = 1 ] && run_train "$eacgm" record -o "$work/cost.eacgm.db" -- "$py" "$root/scripts/gpu_check/train.py" --result "$work/cost_recorded.json"
# the same without the gputime layer (CUPTI in the job): what GPU-side time adds
[ "$bpf" = 1 ] && run_train "$eacgm" record -o "$work/cost0.eacgm.db" --layers auto,-gputime \
  -- "$py" "$root/scripts/gpu_check/train.py" --result "$work/cost_recorded_no_gputime.json"
# and duty-cycled, as a job eacgm does not launch gets it (the agent's): 1 s of every 10 s
[ "$bpf" = 1 ] && run_train "$eacgm" record -o "$work/cost_duty.eacgm.db" --gputime-duty 1s/10s \
  -- "$py" "$root/scripts/gpu_check/train.py" --result "$work/cost_recorded_duty.json"
run_train "$py" "$root/scripts/gpu_check/train.py" --profile - --result "$work/cost_profiled.json"
judge cost "$work/cost_untraced.json" "$work/cost_recorded.json" "$work/cost_profiled.json" \
  "$work/cost_recorded_no_gputime.json" "$work/cost_recorded_duty.json"
fi  # step 6

if want 7; then
section "7. GPU time of the training: plain eacgm record against torch.profiler's kernels without eacgm"
if ! profile_alone; then
  say "  n/a   GPU time of the training: no torch.profiler account to hold it to"
else
  psteps=$("$py" -c "import json,sys; print(json.load(open(sys.argv[1]))['steps'])" "$work/profile_alone.json")
  rec="$work/gputrain.eacgm.db"
  traced "$rec"
  bounded 120 "${TRACE[@]}" "$py" "$root/scripts/gpu_check/train.py" \
    --device "$device" --steps "$psteps" --result "$work/gputrain.json" >"$work/record_gputrain.txt" 2>&1
  say "eacgm record: exit $?; $(grep -E '^layers|eacgm:' "$work/record_gputrain.txt" | tail -3 | tr '\n' ' ')"
  if [ -f "$work/gputrain.json" ]; then
    judge_recording gputrain "$rec" "$work/gputrain.json" "$work/profile_alone.json"
  else
    say "  FAIL  the training wrote no result:"; tail -20 "$work/record_gputrain.txt" | tee -a "$report"; failed=1
  fi
  keep "$rec"
fi
fi  # step 7

section "done"
say "$(grep -c '^  ok' "$report") ok, $(grep -c '^  n/a' "$report") n/a, $(grep -c '^  FAIL' "$report") FAIL in $(( $(date +%s) - t0 )) s; report: $report"
[ "$failed" = 0 ] && [ "$(grep -c '^  FAIL' "$report")" = 0 ]
