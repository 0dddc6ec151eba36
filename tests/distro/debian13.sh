#!/usr/bin/env bash
# hvdrun on Debian 13 ("trixie") from a Debian 12 machine: a root made with debootstrap from the
# Debian mirror (no registry is reachable), entered with chroot inside fresh mount and PID
# namespaces, so that nothing the commands start outlives them and no mount is left behind.
#
#   bash tests/distro/debian13.sh make          # the root (debootstrap, about 3 minutes), kept
#   bash tests/distro/debian13.sh exec CMD...   # CMD as root inside it, in /src: a copy of this
#                                               # tree's tracked and untracked files (not ignored)
#   bash tests/distro/debian13.sh leg           # CI's Debian 13 leg (tests/distro/README.md)
#
# The root is kept at $HVD_DEBIAN13_ROOT (default /var/cache/hvdrun/debian13) and reused while its
# stamp matches this script's debootstrap line; packages installed inside stay too
# (scripts/install-deps.sh is idempotent), so a second run on the same machine skips both.
# Build folders inside /src (build-*) survive a new copy of the tree. Needs root, debootstrap,
# unshare and chroot; the sshd test hosts and rendezvous servers inside share this machine's
# network (loopback), so do not run a leg beside the Debian 12 suite.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
root=${HVD_DEBIAN13_ROOT:-/var/cache/hvdrun/debian13}
mirror=${HVD_DEBIAN_MIRROR:-http://deb.debian.org/debian}
stamp_text="debootstrap --variant=minbase trixie $mirror"

die() { echo "debian13: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "needs root (debootstrap, chroot, mount namespaces)"

make_root() {
  if [ -f "$root/.hvd-stamp" ] && [ "$(cat "$root/.hvd-stamp")" = "$stamp_text" ]; then
    echo "debian13: root $root kept ($(cat "$root/etc/debian_version"))"
    return
  fi
  command -v debootstrap >/dev/null || die "debootstrap is missing: bash scripts/install-deps.sh --podman"
  local start=$SECONDS tmp="$root.tmp"
  rm -rf "$tmp"
  mkdir -p "$(dirname "$root")"
  echo "debian13: $stamp_text $tmp (about 3 minutes)"
  if ! debootstrap --variant=minbase trixie "$tmp" "$mirror" >"$tmp.log" 2>&1; then
    tail -20 "$tmp.log" >&2
    die "debootstrap failed (whole log: $tmp.log)"
  fi
  echo "$stamp_text" >"$tmp/.hvd-stamp"
  rm -rf "$root" && mv "$tmp" "$root" && rm -f "$tmp.log"
  echo "debian13: root made in $((SECONDS - start)) s ($(cat "$root/etc/debian_version"))"
}

# This tree's files (tracked, and untracked ones git does not ignore) as /src, and shared/ beside
# it as /shared when the checkout has one (as CI lays it out).
copy_tree() {
  mkdir -p "$root/src"
  find "$root/src" -mindepth 1 -maxdepth 1 ! -name 'build-*' -exec rm -rf {} +
  git -C "$repo" ls-files -z --cached --others --exclude-standard |
    (cd "$repo" && tar --null -T - --ignore-failed-read -cf -) | tar -C "$root/src" -xf -
  if [ -d "$repo/../shared" ]; then
    rm -rf "$root/shared" && cp -r "$repo/../shared" "$root/shared"
  fi
}

# CMD inside the root. The outer unshare gives a mount and a PID namespace of their own: the
# mounts vanish with it and --kill-child ends whatever CMD left running. The namespace's PID 1 is
# a bash that runs CMD as its child and waits: orphans are re-parented to PID 1, and bash reaps
# them as an init does (a test that waits for a killed orphan to be gone needs that).
exec_in_root() {
  [ -f "$root/.hvd-stamp" ] || die "no root at $root: bash tests/distro/debian13.sh make"
  copy_tree
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  unshare --mount --pid --fork --kill-child --propagation private -- bash -c '
    set -e
    root=$1; shift
    mount --bind "$root" "$root"   # a mount point as /, which ip netns and unshare expect
    mount -t proc proc "$root/proc"
    mount -t sysfs sys "$root/sys"
    mount --rbind /dev "$root/dev"
    mount -t tmpfs -o mode=1777 shm "$root/dev/shm"   # its own, not this machine'"'"'s
    mount -t tmpfs -o mode=1777 tmp "$root/tmp"
    mkdir -p "$root/run/sshd"
    exec chroot "$root" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      HOME=/root LANG=C.UTF-8 TERM=dumb CI="${CI:-}" USER=root LOGNAME=root SHELL=/bin/bash \
      HVD_DEBIAN13_TESTS="${HVD_DEBIAN13_TESTS:-}" \
      /bin/bash -c "cd /src && { \"\$@\" & wait \$!; }" bash "$@"
  ' bash "$root" "$@"
}

case "${1:-}" in
  make) make_root ;;
  exec) shift; [ $# -gt 0 ] || die "exec needs a command"; exec_in_root "$@" ;;
  leg) make_root; exec_in_root bash tests/distro/leg.sh ;;
  *) echo "usage: bash tests/distro/debian13.sh make | exec CMD... | leg" >&2; exit 64 ;;
esac
