#!/usr/bin/env bash
# Builds eacgm's unit tests with AddressSanitizer + UndefinedBehaviorSanitizer on eacgm's own
# code (-DEACGM_SANITIZE=ON; warnings not errors: GCC 12 warns falsely "maybe-uninitialized" in
# libstdc++ under ASan) into ASAN_BUILD (default build-asan/) and runs them once: any
# memory error, leak or undefined behaviour fails. ctest runs it as unit_tests_asan_ubsan.
# Unoptimised, with line tables only: a clean build here took 351 s against 798 s with
# RelWithDebInfo's -O2 -g (CI's longest step), and the tests ran as fast (23 s; the GMM code
# keeps -O1 of its own, CMakeLists.txt). NDEBUG as in the release, so the code checked is the
# code shipped.
#   scripts/asan_unit.sh [GTEST_FILTER]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${ASAN_BUILD:-build-asan}
mkdir -p "$out"
generator=()
[ -f "$out/CMakeCache.txt" ] || generator=(-G Ninja)  # as scripts/build.sh
if ! { cmake "${generator[@]}" -S . -B "$out" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
         -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O0 -g1 -DNDEBUG" -DEACGM_WERROR=OFF -DEACGM_SANITIZE=ON &&
       cmake --build "$out" -j"$(nproc)" --target eacgm_unit_tests; } >"$out/build.log" 2>&1; then
  tail -30 "$out/build.log" >&2
  echo "asan_unit.sh: the sanitized unit tests did not build (whole log: $out/build.log)" >&2
  exit 1
fi
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:strict_string_checks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
"$out/tests/unit/eacgm_unit_tests" --gtest_filter="${1:-*}" --gtest_brief=1
