#!/usr/bin/env bash
# `eacgm report --html` on large recordings: for 10k, 1M and 10M CUDA calls (8 operations, 60 s,
# one call in 4,999 made 5 ms slow and written down as an anomaly), the time to write the page,
# its size, and the time headless Chromium takes to draw it (wall, and the page's own clock at
# the end of drawing), against the baseline: the text `eacgm report` of the same recording.
# Run as root after building (scripts/build.sh); needs sqlite3 and chromium (scripts/setup.sh).
#   bench/html_report.sh [COUNTS...]     default: 10000 1000000 10000000
set -euo pipefail
cd "$(dirname "$0")/.."
counts=("$@")
[ ${#counts[@]} -gt 0 ] || counts=(10000 1000000 10000000)
EACGM=$PWD/build/eacgm
[ -x "$EACGM" ] || { echo "html_report.sh: build first: scripts/build.sh" >&2; exit 1; }
for tool in sqlite3 chromium; do
  command -v $tool >/dev/null || { echo "html_report.sh: $tool is missing (scripts/setup.sh installs it)" >&2; exit 1; }
done
out=$(mktemp -d /tmp/eacgm-html-bench.XXXXXX)
trap 'rm -rf "$out"' EXIT
now() { date +%s.%N; }

# the schema and meta of a real recording, with no calls in it
"$EACGM" record -q -f -o "$out/base.eacgm.db" --layers cuda -- /bin/true >/dev/null 2>&1
t0=$(sqlite3 "$out/base.eacgm.db" "SELECT value FROM meta WHERE key = 'start_monotonic_ns'")

printf "%10s  %8s  %8s  %9s  %8s  %9s  %9s  %s\n" calls "text s" "html s" "x text" "page MB" \
  "draw s" "page ms" "self-check"
for n in "${counts[@]}"; do
  db=$out/r$n.eacgm.db
  cp "$out/base.eacgm.db" "$db"
  sqlite3 "$db" <<SQL
PRAGMA synchronous = OFF;
WITH RECURSIVE k(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM k WHERE i < $n - 1)
INSERT INTO cuda_calls(ts_ns, dur_ns, pid, tid, name, ret)
SELECT $t0 + i * (60000000000 / $n), 2000 + abs(random()) % 20000 +
       CASE WHEN i % 4999 = 7 THEN 5000000 ELSE 0 END, 100, 100 + i % 4,
       CASE i % 8 WHEN 0 THEN 'cudaLaunchKernel' WHEN 1 THEN 'cudaMemcpyAsync'
                  WHEN 2 THEN 'cudaStreamSynchronize' WHEN 3 THEN 'cudaMalloc' WHEN 4 THEN 'cudaFree'
                  WHEN 5 THEN 'cudaEventRecord' WHEN 6 THEN 'cudaMemsetAsync' ELSE 'cudaGetDevice' END, 0
FROM k;
INSERT INTO anomalies(ts_ns, dur_ns, layer, name, score, threshold, cause, features)
SELECT ts_ns, dur_ns, 'cuda', name, -40, -12, 'slow cuda call: ' || name, '[["log_duration_us", -20.0]]'
FROM cuda_calls WHERE dur_ns >= 5000000;
INSERT OR REPLACE INTO meta VALUES ('end_monotonic_ns', $t0 + 60000000000),
  ('detect_trained_on', 'synthetic: bench/html_report.sh'), ('events', $n);
SQL
  a=$(now); "$EACGM" report "$db" >/dev/null; b=$(now)
  "$EACGM" report "$db" --html "$out/p.html" -f 2>/dev/null; c=$(now)
  size=$(stat -c %s "$out/p.html")
  d=$(now)
  dom=$(timeout -k 5 300 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$out/profile" --virtual-time-budget=60000 --dump-dom "file://$out/p.html" 2>/dev/null)
  e=$(now)
  check=$(grep -o '<pre id="eacgm-selfcheck"[^<]*' <<<"$dom" | sed 's/.*hidden="">//; s/&quot;/"/g')
  drawn=$(sed -n 's/.*"drawn_ms":\([0-9]*\).*/\1/p' <<<"$check")
  verdict=$(python3 -c 'import json,sys; c=json.loads(sys.argv[1]); a=c["anomalies"]
print("ok" if not c["errors"] and a["drawn"]==a["checked"] and all(v["inked"]>0 for v in c["charts"].values())
      else "FAILED: "+sys.argv[1][:300])' "$check" 2>/dev/null || echo "FAILED: no self-check")
  awk -v n="$n" -v a="$a" -v b="$b" -v c="$c" -v s="$size" -v d="$d" -v e="$e" -v p="$drawn" -v v="$verdict" \
    'BEGIN { printf "%10d  %8.2f  %8.2f  %9.2f  %8.2f  %9.2f  %9s  %s\n", n, b - a, c - b, (c - b) / (b - a), s / 1048576, e - d, p, v }'
  rm -f "$db" "$out/p.html"
done
