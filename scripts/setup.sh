#!/usr/bin/env bash
# Installs everything eacgm needs to build and test on Debian 12 (idempotent, run as root).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  clang llvm libbpf-dev bpftool libelf-dev zlib1g-dev
  libsqlite3-dev sqlite3 nlohmann-json3-dev libcli11-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev protobuf-compiler
  bpftrace iproute2
  libeigen3-dev python3-sklearn libopenblas0-pthread time
  python3-torch python3.11-dev libcapstone-dev libcap-dev
  nftables iptables
  prometheus-cpp-dev libcpp-httplib-dev prometheus prometheus-alertmanager python3-yaml
  chromium
  golang-go  # go tool pprof: the tests read `eacgm export --pprof` with it
  linux-perf  # bench/profile_cost.sh's baseline (perf record -g)
  libc6-dbg  # glibc's own symbols: profiles name its internal functions (futex and poll waits)
)

if [ "$(id -u)" -ne 0 ]; then
  echo "setup.sh: must run as root to install packages (try: sudo scripts/setup.sh)" >&2
  exit 1
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "setup.sh: all packages present"
fi

# CUDA is not packaged by Debian: the toolkit must already be at /usr/local/cuda.
# It only matters for the end-to-end tests and the demo workload; eacgm itself does not link it.
if [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup.sh: warning: /usr/local/cuda/bin/nvcc not found; CUDA end-to-end tests and the demo will be skipped" >&2
fi

# Browser-side libraries that eacgm embeds in the pages it writes (report --html): the versions
# web/package-lock.json pins, from the npm registry. Node.js and npm come from Debian when the
# machine has neither.
if ! command -v npm >/dev/null; then
  echo "setup.sh: installing npm"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends npm
fi
web="$(cd "$(dirname "$0")/.." && pwd)/web"
if [ -f "$web/node_modules/echarts/dist/echarts.min.js" ] &&
   [ "$(node -p "require('$web/node_modules/echarts/package.json').version" 2>/dev/null)" = \
     "$(node -p "require('$web/package.json').dependencies.echarts" 2>/dev/null)" ]; then
  echo "setup.sh: browser libraries present"
else
  echo "setup.sh: installing browser libraries (npm ci in web/)"
  (cd "$web" && npm ci --no-audit --no-fund --loglevel=error)
fi

# The one library eacgm links statically that Debian ships no static archive of (prometheus-cpp's
# core), built from Debian's source package into .deps/ (see cmake/static_deps.cmake).
"$(dirname "$0")/release_deps.sh" "$(cd "$(dirname "$0")/.." && pwd)/.deps"
