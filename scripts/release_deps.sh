#!/usr/bin/env bash
# Builds the one library the release links statically that Debian ships no static archive of:
# prometheus-cpp's core, from Debian's own source package of the version Debian 12 ships
# (prometheus-cpp-dev 1.0.1-1), checked against the SHA-256 that the package's signed .dsc names.
#
# usage: scripts/release_deps.sh DIR   (installs into DIR/prefix; the tarball is kept in DIR)
# scripts/build.sh --release runs it; a second run with DIR/prefix in place does nothing.
set -euo pipefail
dir="${1:?usage: scripts/release_deps.sh DIR}"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
prefix="$dir/prefix"
version=1.0.1
tarball="prometheus-cpp_${version}.orig.tar.gz"
sha256=593e028d401d3298eada804d252bc38d8cab3ea1c9e88bcd72095281f85e6d16
url="http://deb.debian.org/debian/pool/main/p/prometheus-cpp/$tarball"

if [ -f "$prefix/lib/cmake/prometheus-cpp/prometheus-cpp-config.cmake" ] &&
   [ -f "$prefix/lib/libprometheus-cpp-core.a" ]; then
  exit 0
fi
if ! echo "$sha256  $dir/$tarball" | sha256sum -c --status 2>/dev/null; then
  echo "release_deps.sh: fetching $url"
  curl -fsSL --retry 3 -o "$dir/$tarball.part" "$url" || {
    echo "release_deps.sh: could not download $url (the release build needs Debian's archive;" \
         "or place $tarball in $dir)" >&2
    exit 1
  }
  mv "$dir/$tarball.part" "$dir/$tarball"
  echo "$sha256  $dir/$tarball" | sha256sum -c --status || {
    echo "release_deps.sh: $dir/$tarball does not have the SHA-256 Debian's .dsc names ($sha256):" \
         "delete it and rerun" >&2
    exit 1
  }
fi
rm -rf "$dir/src" "$dir/build"
mkdir -p "$dir/src"
tar -xzf "$dir/$tarball" -C "$dir/src" --strip-components=1
cmake -S "$dir/src" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DENABLE_PULL=OFF -DENABLE_PUSH=OFF \
  -DENABLE_COMPRESSION=OFF -DENABLE_TESTING=OFF -DUSE_THIRDPARTY_LIBRARIES=OFF \
  -DGENERATE_PKGCONFIG=OFF -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_INSTALL_LIBDIR=lib >/dev/null
cmake --build "$dir/build" -j"$(nproc)" >/dev/null
cmake --install "$dir/build" >/dev/null
echo "release_deps.sh: prometheus-cpp $version core (static) in $prefix"
