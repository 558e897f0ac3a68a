#!/usr/bin/env bash
# Proves the release tarball runs in a userland that is not the one it was built in: a Debian 13
# (trixie) root made with debootstrap from Debian's archive (glibc 2.41, its own libstdc++ and
# no libbpf, libelf or capstone at all), where the unpacked binary runs `doctor`, records the
# bundled CUDA loop (the CUDA toolkit mounted read-only, as a GPU node has its own) and a Python
# function of Debian 13's own CPython, then `report`s and `detect`s. Run as root; the first run
# downloads about 60 MB into /var/tmp/eacgm-trixie (kept for the next run). Mounts are made in a
# private mount namespace, so nothing stays mounted whatever happens.
#
# usage: scripts/release_foreign.sh [TARBALL]   (default: the newest dist/eacgm-*.tar.gz)
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"
tarball="${1:-$(ls -t dist/eacgm-*-linux-x86_64.tar.gz 2>/dev/null | head -1)}"
[ -f "$tarball" ] || { echo "release_foreign.sh: no release tarball: run scripts/build.sh --release" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "release_foreign.sh: run as root (debootstrap, chroot, BPF)" >&2; exit 2; }
[ -x build/demo_train ] || { echo "release_foreign.sh: no build/demo_train (scripts/build.sh builds it with nvcc)" >&2; exit 2; }
chroot_dir=/var/tmp/eacgm-trixie

if [ ! -x "$chroot_dir/usr/bin/python3" ]; then
  command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null
  rm -rf "$chroot_dir"
  echo "release_foreign.sh: debootstrap trixie into $chroot_dir"
  debootstrap --variant=minbase --include=python3 trixie "$chroot_dir" http://deb.debian.org/debian \
    >/tmp/eacgm-debootstrap.log 2>&1 || { tail -20 /tmp/eacgm-debootstrap.log >&2; exit 1; }
fi
rm -rf "$chroot_dir/opt/eacgm" "$chroot_dir/work"
mkdir -p "$chroot_dir/opt/eacgm" "$chroot_dir/work" "$chroot_dir/usr/local/cuda"
tar -xzf "$tarball" -C "$chroot_dir/opt/eacgm" --strip-components=1
cp build/demo_train "$chroot_dir/work/"
cat >"$chroot_dir/work/user_code.py" <<'EOF'
def step(i):
    return sum(range(i % 1000))

def train(n):
    return sum(step(i) for i in range(n))

print(train(20000))
EOF

cat >"$chroot_dir/work/run.sh" <<'EOF'
set -u
export PATH=/opt/eacgm/bin:/usr/bin:/bin LD_LIBRARY_PATH=/usr/local/cuda/lib64
cd /work
echo "userland: $(. /etc/os-release; echo "$PRETTY_NAME"), $(ldd --version | head -1)"
echo "libraries here: libbpf $(ls /usr/lib/x86_64-linux-gnu/libbpf.so* 2>/dev/null | wc -l), libelf $(ls /usr/lib/x86_64-linux-gnu/libelf*.so* 2>/dev/null | wc -l), libcapstone $(ls /usr/lib/x86_64-linux-gnu/libcapstone.so* 2>/dev/null | wc -l) files"
echo "ldd eacgm:"; ldd /opt/eacgm/bin/eacgm | sed 's/^/  /'
echo "\$ eacgm --version"; eacgm --version || exit 1
echo "\$ eacgm doctor"; eacgm doctor; echo "(exit $?)"
echo "\$ eacgm record -o demo.eacgm.db -- ./demo_train 400"
eacgm record -o demo.eacgm.db -- ./demo_train 400 >/dev/null || exit 1
echo "\$ eacgm report demo.eacgm.db | head -25"; eacgm report demo.eacgm.db | head -25
echo "\$ eacgm detect demo.eacgm.db | tail -4"; eacgm detect demo.eacgm.db | tail -4
echo "\$ eacgm report demo.eacgm.db --html demo.html"; eacgm report demo.eacgm.db --html demo.html || exit 1
echo "\$ eacgm record -o py.eacgm.db --python-calls user -- python3 user_code.py"
eacgm record -o py.eacgm.db --python-calls user -- python3 user_code.py || exit 1
echo "\$ eacgm report py.eacgm.db | grep -A4 -i python"; eacgm report py.eacgm.db | grep -A4 -i python
EOF
rc=0
unshare --mount --propagation private sh -c "
  mount -t proc proc '$chroot_dir/proc' &&
  mount --rbind /sys '$chroot_dir/sys' &&
  mount --rbind /dev '$chroot_dir/dev' &&
  mount --bind -o ro /usr/local/cuda '$chroot_dir/usr/local/cuda' &&
  chroot '$chroot_dir' /bin/bash /work/run.sh" 2>&1 || rc=$?
echo "release_foreign.sh: exit $rc"
exit "$rc"
