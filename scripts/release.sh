#!/usr/bin/env bash
# Packs the release (scripts/build.sh --release builds, then runs this): build/eacgm, which links
# every library but glibc statically and carries its BPF objects and page assets, becomes
# DIST/eacgm-<version>-linux-x86_64.tar.gz for any x86-64 Linux with glibc and BTF:
#   bin/eacgm                 the one binary (stripped; its debug info is DIST/eacgm-<v>.debug)
#   share/eacgm/deploy/       systemd unit, Kubernetes DaemonSet, Prometheus rules, Grafana board
#   share/eacgm/examples/     the demo workloads' sources
#   README.md                 install and first steps
# Then it checks the binary (scripts/release_check.sh: linked libraries, size, runs).
#
# usage: scripts/release.sh [--dist DIR]     (default: dist)
set -euo pipefail
cd "$(dirname "$0")/.."
dist=dist
case "${1:-}" in
  "") ;;
  --dist) dist="${2:?--dist needs a folder}" ;;
  *) echo "release.sh: unknown argument '$1' (--dist DIR)" >&2; exit 2 ;;
esac
build=build
[ -x "$build/eacgm" ] || { echo "release.sh: no $build/eacgm: run scripts/build.sh --release" >&2; exit 2; }
mkdir -p "$dist"
stage_root="$(mktemp -d "${TMPDIR:-/tmp}/eacgm-release.XXXXXX")"
trap 'rm -rf "$stage_root"' EXIT

version="$("$build/eacgm" --version | awk '{print $NF}')"
case "$version" in ''|*[!0-9.]*) echo "release.sh: could not read the version from $build/eacgm --version" >&2; exit 1 ;; esac
name="eacgm-$version-linux-x86_64"
stage="$stage_root/$name"
mkdir -p "$stage/bin" "$stage/share/eacgm/examples"
objcopy --only-keep-debug "$build/eacgm" "$dist/eacgm-$version.debug"
objcopy --strip-all --add-gnu-debuglink="$dist/eacgm-$version.debug" "$build/eacgm" "$stage/bin/eacgm"
cp -r deploy "$stage/share/eacgm/deploy"
cp examples/demo_train.cu examples/gpt_ddp.py "$stage/share/eacgm/examples/"
cat >"$stage/README.md" <<EOF
# eacgm $version for x86-64 Linux

One binary: every library but glibc is linked in; the BPF programs and the report page's
scripts are inside it. It needs glibc $(scripts/release_check.sh --min-glibc "$stage/bin/eacgm")
or newer and a kernel with BTF (/sys/kernel/btf/vmlinux); \`eacgm doctor\` says which layers
this machine can run and why not.

    sudo install -m 0755 bin/eacgm /usr/local/bin/eacgm
    sudo eacgm doctor

Then, as root (or with CAP_BPF, CAP_PERFMON and CAP_SYS_RESOURCE):

    eacgm record -- python3 train.py      # writes run.eacgm.db
    eacgm detect                          # anomalies, with a probable cause
    eacgm report --html run.html          # one page of charts, opens offline

share/eacgm/deploy/ has a systemd unit, a Kubernetes DaemonSet, Prometheus alert rules and a
Grafana dashboard for the node agent (\`eacgm agent\`).
EOF
tar -C "$stage_root" --owner=0 --group=0 --numeric-owner -czf "$dist/$name.tar.gz" "$name"
(cd "$dist" && sha256sum "$name.tar.gz" >"$name.tar.gz.sha256")
scripts/release_check.sh "$stage/bin/eacgm"
echo "release.sh: $dist/$name.tar.gz ($(du -h "$dist/$name.tar.gz" | cut -f1)), unpacked $(du -sh "$stage" | cut -f1)"
