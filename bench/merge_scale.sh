#!/usr/bin/env bash
# merge + detect of one distributed job at growing size, on synthetic recordings
# (bench/synth_job.cpp: N ranks, 8 per host (4 for 8 ranks), M all_reduces each, one straggling rank, every
# host's clocks off). Prints per size: wall time and peak RSS of `eacgm merge` and of
# `eacgm detect`, their cost per rank x collective (the baseline: the smallest size, measured in
# the same run; linear growth keeps the ratio near 1), merge's clock error against the truth,
# and how many of the straggler's delays detect named.
#   cmake --build build --target benchmarks && bench/merge_scale.sh
#   RANKS="8 64" COLLECTIVES=200 bench/merge_scale.sh     # a quick look
set -euo pipefail
cd "$(dirname "$0")/.."
EACGM=${EACGM:-build/eacgm}
SYNTH=${SYNTH:-build/bench/synth_job}
RANKS=${RANKS:-"8 64 256 1024"}
COLLECTIVES=${COLLECTIVES:-1000}
for tool in "$EACGM" "$SYNTH" /usr/bin/time; do
  [ -x "$tool" ] || { echo "merge_scale.sh: $tool missing (cmake --build build --target benchmarks; scripts/setup.sh installs time)" >&2; exit 1; }
done
work=$(mktemp -d /tmp/eacgm-merge-scale.XXXXXX)
trap 'rm -rf "$work"' EXIT

printf '%6s %6s %10s | %8s %9s %9s | %8s %9s %9s | %9s %9s\n' ranks hosts rows \
  "merge s" "merge MiB" "us/r*c" "detect s" "detect MiB" "us/r*c" "clock err" "found"
base_merge="" base_detect=""
for n in $RANKS; do
  d=$work/$n
  per=$((n >= 16 ? 8 : n / 2))  # 8 ranks per host, as 8-GPU nodes; at least two hosts
  "$SYNTH" "$d" "$n" "$COLLECTIVES" "$per" >/dev/null
  /usr/bin/time -f '%e %M' -o "$d/merge.time" "$EACGM" merge "$d"/host*.eacgm.db -o "$d/job.eacgm.db" \
    2>"$d/merge.log" || { cat "$d/merge.log" >&2; exit 1; }
  /usr/bin/time -f '%e %M' -o "$d/detect.time" "$EACGM" detect "$d/job.eacgm.db" \
    >"$d/detect.out" 2>&1 || { cat "$d/detect.out" >&2; exit 1; }
  read -r ms mk <"$d/merge.time"
  read -r ds dk <"$d/detect.time"
  # clock err: the worst host's distance from the clock synth_job gave it; found: truth
  # intervals that a straggler anomaly naming the right rank overlaps
  read -r rows err found total < <(python3 - "$d" <<'EOF'
import json, sqlite3, sys
d = sys.argv[1]
truth = json.load(open(f"{d}/truth.json"))
db = sqlite3.connect(f"{d}/job.eacgm.db")
rows = db.execute("SELECT count(*) FROM comm_calls").fetchone()[0]
# merge's clock error: what it applied to each host against what the truth needs
applied = dict(kv.split("=") for kv in db.execute(
    "SELECT value FROM meta WHERE key = 'clock_offsets_ns'").fetchone()[0].split(","))
err_ms = max(abs(int(applied[h]) - v) for h, v in truth["offsets_ns"].items()) / 1e6
rank = truth["rank"]
found = 0
for t0, t1 in truth["intervals"]:
    q = ("SELECT count(*) FROM anomalies WHERE ts_ns <= ? AND ts_ns + dur_ns >= ? AND cause LIKE ?")
    found += db.execute(q, (t1, t0, f"%rank {rank} (pid % on host %) joined%")).fetchone()[0] > 0
print(rows, f"{err_ms:.3f}", found, len(truth["intervals"]))
EOF
)
  per_merge=$(awk -v s="$ms" -v n="$n" -v c="$COLLECTIVES" 'BEGIN{printf "%.2f", s*1e6/(n*c)}')
  per_detect=$(awk -v s="$ds" -v n="$n" -v c="$COLLECTIVES" 'BEGIN{printf "%.2f", s*1e6/(n*c)}')
  base_merge=${base_merge:-$per_merge}
  base_detect=${base_detect:-$per_detect}
  printf '%6s %6s %10s | %8s %9.0f %9s | %8s %9.0f %9s | %6s ms %9s\n' "$n" "$((n / per))" "$rows" \
    "$ms" "$(awk -v k="$mk" 'BEGIN{print k/1024}')" "$per_merge" \
    "$ds" "$(awk -v k="$dk" 'BEGIN{print k/1024}')" "$per_detect" "$err" "$found/$total"
  rm -f "$d"/host*.eacgm.db  # keep the disk
done
echo "us/r*c: seconds per (rank x collective), x1e6; baseline (the first size) merge $base_merge, detect $base_detect"
