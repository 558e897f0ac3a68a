#!/usr/bin/env bash
# The agent through churn and stop signals, many times: each cycle starts a plain `eacgm agent`
# (the gpu layer on, through the tests' fake NVML) on a state dir the cycles share, runs a
# CUDA loop of 7,777 cudaMalloc calls and a 2-rank Gloo training beside it, scrapes /metrics and
# asks for a flight recording meanwhile, and stops the agent with SIGTERM (SIGINT every third
# cycle) at a random moment: during the training or after it. Every cycle must end with exit
# status 0 and nothing on stderr that says terminate, abort or sanitizer; a core dump or a
# signal death fails the run. Run as root after scripts/build.sh:
#   bench/agent_churn.sh [CYCLES]       (default 20; about 15 s a cycle here)
# EACGM=path/to/eacgm picks another build (e.g. an ASan one).
set -euo pipefail
cd "$(dirname "$0")/.."
cycles=${1:-20}
[[ "$cycles" =~ ^[0-9]+$ && "$cycles" -ge 1 ]] || { echo "agent_churn.sh: CYCLES must be a whole number >= 1, not '$cycles'" >&2; exit 2; }
EACGM=${EACGM:-build/eacgm}
NVML=build/tests/unit/fake_nvml/full/libnvidia-ml.so.1
LOOP=build/tests/e2e/workloads/cuda_api_calls
[ -x "$EACGM" ] && [ -e "$NVML" ] || { echo "agent_churn.sh: build first (scripts/build.sh)" >&2; exit 1; }
out=$(mktemp -d /tmp/eacgm-churn.XXXXXX)
state=$out/state
cat >"$out/malloc_loop.py" <<'EOF'
import ctypes, sys
cudart = ctypes.CDLL("libcudart.so.13")
p = ctypes.c_void_p()
for _ in range(int(sys.argv[1])):
    cudart.cudaMalloc(ctypes.byref(p), 64)
EOF
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
failed=0
for i in $(seq 1 "$cycles"); do
  p=$(port)
  log=$out/agent$i.log
  EACGM_NVML_LIBRARY=$PWD/$NVML "$EACGM" agent --listen "127.0.0.1:$p" --state-dir "$state" \
    --duration 120 >"$log" 2>&1 &
  agent=$!
  for _ in $(seq 1 150); do grep -q "agent tracing this node" "$log" && break; sleep 0.2; done
  LD_LIBRARY_PATH=/usr/local/cuda/lib64 python3 "$out/malloc_loop.py" 7777
  [ -x "$LOOP" ] && "$LOOP" >/dev/null 2>&1 || true
  steps=$((300 + RANDOM % 900))
  python3 tests/e2e/workloads/launch_ranks.py 2 eval/workloads/gloo_straggler.py "$steps" \
    "$out/truth$i.json" 0.3 0.6 0.1 20 >"$out/train$i.log" 2>&1 &
  job=$!
  # scrapes and a dump while it runs; the stop at a random moment in the next 0-6 s
  end=$((SECONDS + RANDOM % 7))
  curl -s -m 5 -X POST "127.0.0.1:$p/dump" >/dev/null || true
  while [ $SECONDS -lt $end ]; do curl -s -m 5 -o /dev/null "127.0.0.1:$p/metrics" || true; sleep 0.2; done
  sig=TERM; [ $((i % 3)) -eq 0 ] && sig=INT
  kill -"$sig" "$agent" 2>/dev/null || true
  rc=0; wait "$agent" || rc=$?
  wait "$job" 2>/dev/null || true
  bad=$(grep -Ei 'terminate|abort|sanitizer|runtime error' "$log" || true)
  if [ "$rc" -ne 0 ] || [ -n "$bad" ]; then
    failed=$((failed + 1))
    echo "cycle $i: agent exit $rc after SIG$sig ${bad:+: $bad} (log $log)"
  else
    echo "cycle $i: ok (SIG$sig, $steps steps, $(grep -c 'anomaly:' "$log" || true) anomaly lines)"
  fi
done
echo "agent_churn: $cycles cycles, $failed failed (logs in $out)"
[ "$failed" -eq 0 ]
