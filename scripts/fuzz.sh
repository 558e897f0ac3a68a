#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, clang with ASan+UBSan) into build-fuzz/ and runs each
# for SECONDS (default 10) from its seed corpus in fuzz/corpus/TARGET (copied: the seeds stay
# as they are). A crash stops with the target's report and the input under
# build-fuzz/artifacts/; new inputs found are kept in build-fuzz/corpus/TARGET between runs.
#   scripts/fuzz.sh [SECONDS] [TARGET...]     targets: proc_maps job_identity csv gmm_model elf python recording http_request
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-10}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(proc_maps job_identity csv gmm_model elf python recording http_request)
command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ is missing (scripts/setup.sh installs clang)" >&2; exit 1; }
[[ "$seconds" =~ ^[0-9]+$ ]] || { echo "fuzz.sh: SECONDS must be a whole number, not '$seconds'" >&2; exit 2; }
for t in "${targets[@]}"; do
  [ -d "fuzz/corpus/$t" ] || { echo "fuzz.sh: unknown target '$t' (one of: $(ls fuzz/corpus | tr '\n' ' '))" >&2; exit 2; }
done
out=${FUZZ_BUILD:-build-fuzz}
generator=()
[ -f "$out/CMakeCache.txt" ] || generator=(-G Ninja)  # as scripts/build.sh
mkdir -p "$out/artifacts"
if ! { cmake "${generator[@]}" -S fuzz -B "$out" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo &&
       cmake --build "$out" -j"$(nproc)" --target $(printf 'fuzz_%s ' "${targets[@]}"); } \
    >"$out/build.log" 2>&1; then
  tail -30 "$out/build.log" >&2
  echo "fuzz.sh: the fuzz targets did not build (whole log: $out/build.log)" >&2
  exit 1
fi
for t in "${targets[@]}"; do
  mkdir -p "$out/corpus/$t"
  cp -n fuzz/corpus/"$t"/* "$out/corpus/$t/" 2>/dev/null || true
  echo "fuzz.sh: $t for ${seconds} s"
  log="$out/$t.log"
  if ! "$out/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -artifact_prefix="$out/artifacts/$t-" -print_final_stats=1 "$out/corpus/$t" >"$log" 2>&1; then
    tail -40 "$log" >&2
    echo "fuzz.sh: $t failed: the input is in $out/artifacts/ (replay: $out/fuzz_$t FILE)" >&2
    exit 1
  fi
  grep -E "^stat::number_of_executed_units|^#[0-9]+.*DONE" "$log" | tail -2 | sed "s/^/  /"
done
