#!/usr/bin/env bash
# Configures and builds eacgm, its tests and the demo workload into build/. build/eacgm links
# every library but glibc statically (cmake/static_deps.cmake): the binary the tests run is the
# one the release ships.
#
#   scripts/build.sh             build/: eacgm, the tests, the demo workload
#   scripts/build.sh --release   the same, then scripts/release.sh packs build/eacgm as
#                                dist/eacgm-<version>-linux-x86_64.tar.gz and checks it
set -euo pipefail
cd "$(dirname "$0")/.."

release=0
case "${1:-}" in
  "") ;;
  --release) release=1 ;;
  -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
  *) echo "build.sh: unknown argument '$1' (--release, or nothing)" >&2; exit 2 ;;
esac

# Ninja for a new tree: it compiles a target's files while the libraries it links are still
# being built, which keeps both cores of a small machine busy; an existing tree keeps its own.
generator=()
[ -f build/CMakeCache.txt ] || generator=(-G Ninja)
cmake "${generator[@]}" -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEACGM_WERROR=ON >/dev/null
cmake --build build -j"$(nproc)"
[ "$release" = 0 ] || exec scripts/release.sh
