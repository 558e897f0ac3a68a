#!/usr/bin/env bash
# Builds the libraries eacgm links statically that Debian ships no static archive of:
# prometheus-cpp's core and fmt, from Debian's own source packages of the versions Debian 12
# ships (prometheus-cpp-dev 1.0.1-1, libfmt-dev 9.1.0+ds1-2), each checked against the SHA-256
# that the package's signed .dsc names. (fmt header-only would do, at twice the compile time of
# every file that formats.)
#
# usage: scripts/release_deps.sh DIR   (installs into DIR/prefix; the tarballs are kept in DIR)
# scripts/setup.sh runs it; a second run with DIR/prefix in place does nothing.
set -euo pipefail
dir="${1:?usage: scripts/release_deps.sh DIR}"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
prefix="$dir/prefix"

# build NAME TARBALL SHA256 URL CMAKE_ARGS...: fetch (unless a checked copy is in DIR), unpack,
# build and install one library into DIR/prefix
build() {
  local name="$1" tarball="$2" sha256="$3" url="$4"
  shift 4
  if ! echo "$sha256  $dir/$tarball" | sha256sum -c --status 2>/dev/null; then
    echo "release_deps.sh: fetching $url"
    curl -fsSL --retry 3 -o "$dir/$tarball.part" "$url" || {
      echo "release_deps.sh: could not download $url (the static build needs Debian's archive;" \
           "or place $tarball in $dir, or configure with -DEACGM_STATIC=OFF)" >&2
      exit 1
    }
    mv "$dir/$tarball.part" "$dir/$tarball"
    echo "$sha256  $dir/$tarball" | sha256sum -c --status || {
      echo "release_deps.sh: $dir/$tarball does not have the SHA-256 Debian's .dsc names" \
           "($sha256): delete it and rerun" >&2
      exit 1
    }
  fi
  rm -rf "$dir/src-$name" "$dir/build-$name"
  mkdir -p "$dir/src-$name"
  tar -xzf "$dir/$tarball" -C "$dir/src-$name" --strip-components=1
  cmake -S "$dir/src-$name" -B "$dir/build-$name" -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=OFF -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
    -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_INSTALL_LIBDIR=lib "$@" >/dev/null
  cmake --build "$dir/build-$name" -j"$(nproc)" >/dev/null
  cmake --install "$dir/build-$name" >/dev/null
  rm -rf "$dir/src-$name" "$dir/build-$name"
  echo "release_deps.sh: $name (static) in $prefix"
}

debian=http://deb.debian.org/debian/pool/main
[ -f "$prefix/lib/libprometheus-cpp-core.a" ] ||
  build prometheus-cpp prometheus-cpp_1.0.1.orig.tar.gz \
    593e028d401d3298eada804d252bc38d8cab3ea1c9e88bcd72095281f85e6d16 \
    "$debian/p/prometheus-cpp/prometheus-cpp_1.0.1.orig.tar.gz" \
    -DENABLE_PULL=OFF -DENABLE_PUSH=OFF -DENABLE_COMPRESSION=OFF -DENABLE_TESTING=OFF \
    -DUSE_THIRDPARTY_LIBRARIES=OFF -DGENERATE_PKGCONFIG=OFF
[ -f "$prefix/lib/libfmt.a" ] ||
  build fmt fmtlib_9.1.0+ds1.orig.tar.gz \
    84ce1c2d0be3a9863935137969dcec6970125caac032f82474640bfc81463583 \
    "$debian/f/fmtlib/fmtlib_9.1.0+ds1.orig.tar.gz" \
    -DFMT_DOC=OFF -DFMT_TEST=OFF -DFMT_INSTALL=ON
