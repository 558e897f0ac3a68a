#!/usr/bin/env bash
# Runs the test suite N times (as the README's test command runs it: ctest, one test at a time)
# and lists every test that failed even once, with how often: the check for timing- and
# sampling-sensitive tests (a flake sinks a whole submission).
#
# usage: scripts/test_loop.sh [-n RUNS] [-L LABEL] [--load] [-o DIR]
#   -n RUNS    how many runs (default 5)
#   -L LABEL   only tests with this ctest label (e.g. e2e); default: the whole suite
#   --load     keep a busy loop pinned to CPU 0 during every run (a CPU hog neighbour)
#   -o DIR     where each run's log goes (default: /tmp/eacgm-test-loop)
# Build first (scripts/build.sh). Exit status: 0 when every run passed, 1 otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=5 label="" load=0 out=/tmp/eacgm-test-loop
while [ $# -gt 0 ]; do
  case "$1" in
    -n) runs="${2:?-n needs a number}"; shift 2 ;;
    -L) label="${2:?-L needs a label}"; shift 2 ;;
    --load) load=1; shift ;;
    -o) out="${2:?-o needs a folder}"; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "test_loop.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case "$runs" in ''|*[!0-9]*|0) echo "test_loop.sh: -n wants a positive whole number, not '$runs'" >&2; exit 2 ;; esac
[ -d build ] || { echo "test_loop.sh: no build/ here: run scripts/build.sh first" >&2; exit 2; }
mkdir -p "$out"

hog=""
# (each step guarded: under set -e, the killed loop's status from wait would end the script)
stop_hog() {
  if [ -n "$hog" ]; then
    kill "$hog" 2>/dev/null || true
    wait "$hog" 2>/dev/null || true
  fi
  hog=""
}
trap 'stop_hog' EXIT
trap 'stop_hog; exit 130' INT TERM

args=(--test-dir build --output-on-failure)
[ -n "$label" ] && args+=(-L "$label")
failed_runs=0
for i in $(seq 1 "$runs"); do
  if [ "$load" = 1 ]; then
    taskset -c 0 sh -c 'while :; do :; done' &
    hog=$!
  fi
  log="$out/run$i.log"
  start=$(date +%s)
  if ctest "${args[@]}" >"$log" 2>&1; then rc=0; else rc=$?; failed_runs=$((failed_runs + 1)); fi
  stop_hog
  summary=$(grep -E '^[0-9]+% tests passed' "$log" || echo "no summary (rc $rc)")
  echo "run $i/$runs$([ "$load" = 1 ] && echo ' (loaded)'): $summary in $(($(date +%s) - start)) s; log $log"
done

echo "--- $runs runs${label:+ of label $label}$([ "$load" = 1 ] && echo ', a busy loop on CPU 0'): $failed_runs failed"
# ctest's list of failures: "  123 - suite.name (Failed)"
cat "$out"/run*.log 2>/dev/null | sed -n 's/^ *[0-9]* - \(.*\) (\(Failed\|Timeout\|SEGFAULT\|Subprocess aborted\|Exception\).*)$/\1 (\2)/p' |
  sort | uniq -c | sort -rn | sed 's/^/failed: /'
[ "$failed_runs" -eq 0 ]
