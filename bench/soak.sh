#!/usr/bin/env bash
# Soak: one `eacgm record` for MINUTES (default 60) against a workload that never stops:
#   - 2 threads of cudaMalloc calls paced at RATE calls/s in all (default 100000: the highest
#     rate an hour of which fits this disk: about 40 bytes a call, 14 GB an hour; record keeps
#     up with 880k calls/s here, bench/record_overhead.sh);
#   - every BURST_EVERY s (300) a burst of BURST_S s (20) of 4 threads calling as fast as they
#     can, which the ring cannot hold: events are dropped, and counted;
#   - process churn: a new traced process (1,000 calls, then exit) every second.
# Every SAMPLE s (30) it prints the recorder's RSS, open fds, BPF links, maps and programs, its
# CPU over the interval, and the recording's events, drops and size; at the end whether each
# stayed flat after the warm-up (the first WARMUP s, 300). Run as root after
# `cmake --build build --target benchmarks`:
#   bench/soak.sh [MINUTES]          e.g. bench/soak.sh 5 for a short look
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-60}
RATE=${RATE:-100000} BURST_EVERY=${BURST_EVERY:-300} BURST_S=${BURST_S:-20}
SAMPLE=${SAMPLE:-30} WARMUP=${WARMUP:-300}
[[ "$minutes" =~ ^[0-9]+$ && "$minutes" -ge 1 ]] || { echo "soak.sh: MINUTES must be a whole number >= 1, not '$minutes'" >&2; exit 2; }
for v in RATE BURST_EVERY BURST_S SAMPLE WARMUP; do
  [[ "${!v}" =~ ^[0-9]+$ && "${!v}" -ge 1 ]] || { echo "soak.sh: $v must be a whole number >= 1, not '${!v}'" >&2; exit 2; }
done
EACGM=build/eacgm LOOP=$PWD/build/bench/cuda_call_loop
[ -x "$EACGM" ] && [ -x "$LOOP" ] || { echo "soak.sh: build first: cmake --build build --target benchmarks eacgm" >&2; exit 1; }
out=${SOAK_OUT:-$(mktemp -d /tmp/eacgm-soak.XXXXXX)}
mkdir -p "$out"
seconds=$((minutes * 60))

# The traced workload: one shell whose children are the loops (all traced: record follows
# children). Ends by itself after `seconds`.
cat >"$out/workload.sh" <<EOF
#!/usr/bin/env bash
end=\$((SECONDS + $seconds))
half=\$(($RATE / 2))
"$LOOP" \$((half * $seconds)) 2 "\$half" >/dev/null &
paced=\$!
(
  while [ \$SECONDS -lt \$end ]; do
    sleep $BURST_EVERY
    [ \$SECONDS -lt \$end ] || break
    timeout $BURST_S "$LOOP" 1000000000 4 >/dev/null || true
  done
) &
bursts=\$!
while [ \$SECONDS -lt \$end ]; do
  "$LOOP" 1000 1 >/dev/null
  sleep 1
done
kill \$paced \$bursts 2>/dev/null || true
pkill -P \$bursts 2>/dev/null || true
wait
EOF
chmod +x "$out/workload.sh"

db=$out/soak.eacgm.db
"$EACGM" record -q -f -o "$db" --layers cuda,host -- "$out/workload.sh" >"$out/record.log" 2>&1 &
rec=$!
trap 'kill -INT $rec 2>/dev/null || true; wait $rec 2>/dev/null || true' EXIT
hz=$(getconf CLK_TCK)
cpu_s() { awk -v hz="$hz" '{ print ($14 + $15) / hz }' "/proc/$rec/stat"; }
meta() { sqlite3 -readonly "$db" "select value from meta where key='$1'" 2>/dev/null || echo ?; }
fd_kinds() {  # fds, bpf links, maps, programs
  local fds=0 links=0 maps=0 progs=0 target
  for f in /proc/$rec/fd/*; do
    target=$(readlink "$f" 2>/dev/null) || continue
    fds=$((fds + 1))
    case $target in
      *bpf_link* | *bpf-link*) links=$((links + 1)) ;;
      *bpf-map*) maps=$((maps + 1)) ;;
      *bpf-prog*) progs=$((progs + 1)) ;;
    esac
  done
  echo "$fds $links $maps $progs"
}

echo "soak: $minutes min, $RATE calls/s paced, bursts of $BURST_S s every $BURST_EVERY s, a new process every second; recording $db"
printf '%7s %9s %5s %6s %5s %6s %7s %13s %11s %9s\n' t_s rss_mb fds links maps progs cpu_% events dropped db_mb
samples=$out/samples.tsv
: >"$samples"
sleep 5
t0=$(date +%s.%N) last_t=$t0 last_cpu=$(cpu_s)
while kill -0 $rec 2>/dev/null; do
  sleep "$SAMPLE"
  kill -0 $rec 2>/dev/null && [ -e /proc/$rec/stat ] || break
  now=$(date +%s.%N) cpu=$(cpu_s) rss=$(awk '/VmRSS/ {print $2 / 1024}' /proc/$rec/status)
  read -r fds links maps progs <<<"$(fd_kinds)"
  pct=$(awk -v a="$cpu" -v b="$last_cpu" -v n="$now" -v l="$last_t" 'BEGIN { printf "%.1f", 100 * (a - b) / (n - l) }')
  t=$(awk -v n="$now" -v s="$t0" 'BEGIN { printf "%.0f", n - s }')
  size=$(du -m "$db" "$db-wal" 2>/dev/null | awk '{ s += $1 } END { print s }')
  row=$(printf '%7s %9.1f %5s %6s %5s %6s %7s %13s %11s %9s' "$t" "$rss" "$fds" "$links" "$maps" "$progs" "$pct" \
        "$(meta events)" "$(meta dropped_events)" "$size")
  echo "$row"
  echo "$row" >>"$samples"
  last_t=$now last_cpu=$cpu
done
wait $rec && rc=0 || rc=$?
trap - EXIT
echo "soak: record exited $rc"
if [ -s "$out/record.log" ]; then sed 's/^/  record: /' "$out/record.log" | tail -5; fi
# Flat after the warm-up: the spread of each resource over the samples after WARMUP s, and the
# RSS floor (its lowest sample) in each tenth of that time: bursts raise RSS while the writer
# catches up (at most max_queued_rows queued), so growth shows in the floors, not the peaks.
awk -v w="$WARMUP" '
  $1 >= w { n++; t[n] = $1; r[n] = $2
    for (c = 2; c <= 7; c++) { if (n == 1 || $c < lo[c]) lo[c] = $c; if (n == 1 || $c > hi[c]) hi[c] = $c } }
  END {
    if (n < 2) { print "soak: too short to judge flatness (fewer than 2 samples after the warm-up)"; exit }
    printf "after warm-up (%d samples): rss %.1f-%.1f MB, fds %d-%d, bpf links %d-%d, maps %d-%d, progs %d-%d, cpu %.1f-%.1f%% of a core\n",
      n, lo[2], hi[2], lo[3], hi[3], lo[4], hi[4], lo[5], hi[5], lo[6], hi[6], lo[7], hi[7]
    span = t[n] - t[1]; floors = ""
    for (k = 0; k < 10; k++) {
      f = -1
      for (i = 1; i <= n; i++)
        if (t[i] - t[1] >= k * span / 10 && t[i] - t[1] <= (k + 1) * span / 10 && (f < 0 || r[i] < f)) f = r[i]
      if (f >= 0) floors = floors sprintf(" %.1f", f)
    }
    print "rss floor per tenth of the run (MB):" floors
  }' "$samples"
echo "soak: processes in the recording: $(sqlite3 -readonly "$db" 'select count(*) from processes'), events $(meta events), dropped $(meta dropped_events) (samples: $samples; remove $out when done)"
