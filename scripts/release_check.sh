#!/usr/bin/env bash
# Checks a release binary is the portable one it claims to be: it needs no shared library but
# glibc's, it is under 30 MB (it travels to GPU nodes), and it runs (`--version`, and `doctor`
# when run as root). Cheap enough for CI; scripts/release_foreign.sh runs it in another userland.
#
# usage: scripts/release_check.sh [BINARY]        (default: build/eacgm)
#        scripts/release_check.sh --min-glibc BINARY   prints the newest glibc version it needs
set -euo pipefail
cd "$(dirname "$0")/.."

min_glibc() {  # the newest GLIBC_x.y among the versioned symbols the binary imports
  objdump -T "$1" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1
}
if [ "${1:-}" = "--min-glibc" ]; then
  min_glibc "${2:?--min-glibc needs a binary}"
  exit 0
fi
bin="${1:-build/eacgm}"
[ -x "$bin" ] || { echo "release_check.sh: no $bin (run scripts/build.sh)" >&2; exit 2; }

fail=0
# glibc's own libraries, and nothing else
needed=$(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
for lib in $needed; do
  case "$lib" in
    libc.so.6|libm.so.6|libdl.so.2|libpthread.so.0|librt.so.1|ld-linux-x86-64.so.2) ;;
    libgcc_s.so.1) ;;  # GCC's unwinder, on every glibc system (CMakeLists.txt says why shared)
    *) echo "release_check.sh: FAIL $bin needs $lib (only glibc and libgcc_s may stay shared)"; fail=1 ;;
  esac
done
echo "release_check.sh: NEEDED: $needed"
ldd "$bin" | sed 's/^/  ldd: /'
# (the last grep reads all: with -q it could stop at the first line, and under pipefail the
# SIGPIPE before it would read as "nothing listed")
if ldd "$bin" | grep -v -E 'linux-vdso|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|ld-linux|libgcc_s\.so' | grep . >/dev/null; then
  echo "release_check.sh: FAIL ldd lists a library that is neither glibc's nor libgcc_s"; fail=1
fi
# the oldest glibc it runs on is a promise of the README: no newer symbol may creep in
newest=$(min_glibc "$bin")
if [ "$(printf '%s\n' "$newest" 2.34 | sort -V | tail -1)" != 2.34 ]; then
  echo "release_check.sh: FAIL it needs glibc $newest; the README promises 2.34"; fail=1
fi
# the size that travels: without debug info (the release strips it into a file of its own)
stripped=$(mktemp)
objcopy --strip-all "$bin" "$stripped"
bytes=$(stat -c %s "$stripped")
rm -f "$stripped"
limit=$((30 * 1024 * 1024))
echo "release_check.sh: size $bytes bytes ($((bytes / 1024 / 1024)) MiB; limit 30 MiB)"
[ "$bytes" -lt "$limit" ] || { echo "release_check.sh: FAIL the binary is over 30 MiB"; fail=1; }
echo "release_check.sh: needs glibc $newest or newer"
version=$("$bin" --version) || { echo "release_check.sh: FAIL $bin --version"; fail=1; }
echo "release_check.sh: --version: $version"
if [ "$(id -u)" = 0 ]; then
  # doctor exits 1 where recording cannot work; the check here is that it runs and says so
  if "$bin" doctor >/tmp/eacgm-release-doctor.$$ 2>&1 || [ $? -eq 1 ]; then
    sed 's/^/  doctor: /' /tmp/eacgm-release-doctor.$$
    grep -q "^recording can" /tmp/eacgm-release-doctor.$$ ||
      grep -q "^recording cannot work here" /tmp/eacgm-release-doctor.$$ ||
      { echo "release_check.sh: FAIL doctor printed no verdict"; fail=1; }
  else
    echo "release_check.sh: FAIL doctor crashed:"; cat /tmp/eacgm-release-doctor.$$; fail=1
  fi
  rm -f /tmp/eacgm-release-doctor.$$
fi
[ "$fail" = 0 ] && echo "release_check.sh: ok"
exit "$fail"
