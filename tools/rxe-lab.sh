#!/usr/bin/env bash
# rxe-lab.sh - run a command against real RDMA verbs (soft-RoCE, rdma_rxe) inside a
# throw-away qemu guest, with this checkout and its Python dependencies shared in.
#
#   tools/rxe-lab.sh [COMMAND...]     default COMMAND: the end-to-end tests on the "ibverbs" provider
#
# Runs as root on a Debian host. Everything comes from the Debian archive (qemu,
# debootstrap, the guest kernel package) and from PyPI (the project's wheels, for the
# guest's Python 3.11); nothing else is downloaded. The first run builds a guest
# (about 2 minutes) and caches it; later runs boot it in about 10 seconds. Labs may run at
# once (from several checkouts): each has its own folder for its checkout and guest image,
# and the guest's Python packages live in a folder per set of packages, never changed.
#
# In the guest: Debian bookworm, Python 3.11, rdma-core 44's libibverbs, two
# soft-RoCE devices rxe0 and rxe1 on the two ends of a veth pair (port 1, GID index 0
# is the IPv6 link-local RoCEv2 GID). COMMAND runs from a writable copy of the
# checkout with src/ and the dependencies on PYTHONPATH. The guest's exit status
# becomes ours; the last line says "rxe-lab: PASS" or "rxe-lab: FAIL".
#
# Settings (environment):
#   RXE_CACHE      build cache (default ~/.cache/tensorverbs-rxe)
#   RXE_FRESH=1    rebuild the guest and the dependency folder
#   RXE_NO_APT=1   do not apt-get install the host tools (they must be there)
#   RXE_ACCEL      tcg (default) or kvm
#   RXE_MEMORY     the guest's memory in MiB (default 6144: the core's ibverbs tests peak near
#                  3 GiB on the 6.12 kernel, which killed them in a guest of 3 GiB)
#   RXE_TIMEOUT    seconds for the whole guest run (default 1200)
#   RXE_SMOKE=0    skip the ibv_rc_pingpong check that runs before COMMAND
#   RXE_MIRROR     Debian mirror (default: the one this host's apt uses)
#   RXE_KERNEL_SUITE  the Debian suite whose linux-image-amd64 the guest boots (default
#                  bookworm-backports: its soft-RoCE has the fixes of the kernels since 6.1,
#                  whose queue pairs stall now and then with memory windows in use);
#                  empty: the host's own suite, through apt
#   RXE_PASS_ENV   space-separated names of host variables to pass into the guest
#                  (TENSORVERBS_*, RDMA_* and PYTEST_ADDOPTS always pass)
#   RXE_CORE_PYTHON  the Python whose built tensorverbs._core the guest gets
#                  (default: the checkout's .venv/bin/python, as make install leaves it)
#   RXE_GUEST_EXTRAS  more Python packages for the guest (default torch==2.13.0, which the
#                  tests of DLPack and torch tensors need; empty: none)
#   RXE_CARRY      space-separated paths in the checkout (files or folders, e.g. the host-built
#                  build/release/tests/tensorverbs_tests: the guest is the same Debian release)
#                  copied into the guest's copy of the checkout at the same place
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${RXE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tensorverbs-rxe}
ACCEL=${RXE_ACCEL:-tcg}
TIMEOUT=${RXE_TIMEOUT:-1200}
SUITE=bookworm            # the guest's Python must stay 3.11: the wheels below are built for it
GUEST_PKGS=rdma-core,ibverbs-providers,ibverbs-utils,python3,iproute2,kmod,procps,nftables
GUEST_MODULES="rdma_rxe ib_uverbs crc32_generic veth virtio_pci 9pnet_virtio 9p nf_tables nft_numgen"
TEST_TOOLS="pytest pytest-timeout hypothesis ${RXE_GUEST_EXTRAS-torch==2.13.0}"
CORE_PYTHON=${RXE_CORE_PYTHON:-$REPO/.venv/bin/python}

START=$(date +%s)
say() { echo "[rxe-lab $(( $(date +%s) - START ))s] $*"; }
die() { echo "rxe-lab: FAIL: $*" >&2; exit 1; }

if [ $# -eq 0 ]; then
  set -- python3 -m pytest -q -p no:cacheprovider tests/rdma -k ibverbs
fi
[ "$(id -u)" = 0 ] || die "must run as root (debootstrap and the guest image need it)"
[ "${RXE_FRESH:-0}" = 1 ] && rm -rf "$CACHE"
mkdir -p "$CACHE"

# -------------------------------------------------------------------------- host tools
need_tools() {
  for t in qemu-system-x86_64 debootstrap cpio zstd xz curl modprobe depmod dpkg-deb; do
    command -v "$t" >/dev/null || return 1
  done
}
if ! need_tools; then
  [ "${RXE_NO_APT:-0}" = 1 ] && die "host tools missing (qemu-system-x86 debootstrap cpio zstd kmod)"
  say "installing host tools with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends \
    qemu-system-x86 debootstrap cpio zstd xz-utils curl kmod ca-certificates python3-pip >/dev/null
  need_tools || die "host tools still missing after apt-get install"
fi

if ! python3 -m pip --version >/dev/null 2>&1; then
  [ "${RXE_NO_APT:-0}" = 1 ] && die "python3 -m pip is missing on the host"
  say "installing python3-pip with apt-get"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-pip >/dev/null \
    || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-pip >/dev/null; } \
    || die "cannot install python3-pip"
fi

# ------------------------------------------------------------------- guest kernel (.deb)
MIRROR=${RXE_MIRROR:-$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)}
[ -n "$MIRROR" ] || MIRROR=$(awk '$1 == "deb" {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
[ -n "$MIRROR" ] || die "no Debian mirror found in the host's apt sources; set RXE_MIRROR"
KSUITE=${RXE_KERNEL_SUITE-$SUITE-backports}
if [ -n "$KSUITE" ]; then
  # the kernel behind linux-image-amd64 in $KSUITE, read from the mirror's index (the
  # host's apt sources stay as they are)
  KINDEX=$CACHE/kernel-index.$KSUITE
  if [ ! -s "$KINDEX" ] || [ -n "$(find "$KINDEX" -mmin +1440)" ]; then
    curl -fsSL "$MIRROR/dists/$KSUITE/main/binary-amd64/Packages.xz" | xz -dc > "$KINDEX.tmp" \
      || die "cannot read the package index of $KSUITE from $MIRROR"
    mv "$KINDEX.tmp" "$KINDEX"
  fi
  field() { awk -v p="$1" -v f="$2" '$1 == "Package:" {on = ($2 == p)} on && $1 == f {print $2; exit}' "$KINDEX"; }
  KPKG=$(field linux-image-amd64 Depends:)
  KFILE=$(field "$KPKG" Filename:)
  [ -n "$KPKG" ] && [ -n "$KFILE" ] || die "no linux-image-amd64 in $KSUITE"
else
  kernel_package() {
    apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}'
  }
  KPKG=$(kernel_package)
  if [ -z "$KPKG" ]; then
    [ "${RXE_NO_APT:-0}" = 1 ] && die "apt knows no linux-image-amd64 (run apt-get update)"
    apt-get update -qq
    KPKG=$(kernel_package)
  fi
  [ -n "$KPKG" ] || die "cannot find the kernel package behind linux-image-amd64"
fi
KVER=${KPKG#linux-image-}
KDIR=$CACHE/kernel-$KVER
if [ ! -f "$KDIR/boot/vmlinuz-$KVER" ]; then
  say "fetching $KPKG${KSUITE:+ from $KSUITE}"
  rm -rf "$CACHE"/kernel-*/ "$CACHE/deb"
  mkdir -p "$CACHE/deb"
  if [ -n "$KSUITE" ]; then
    curl -fsSL -o "$CACHE/deb/$KPKG.deb" "$MIRROR/$KFILE" || die "downloading $MIRROR/$KFILE failed"
  else
    (cd "$CACHE/deb" && apt-get download -qq "$KPKG" >/dev/null 2>&1) || die "apt-get download $KPKG failed"
  fi
  dpkg-deb -x "$CACHE"/deb/*.deb "$KDIR.tmp" && rm -rf "$CACHE/deb"
  depmod -b "$KDIR.tmp" "$KVER"
  mv "$KDIR.tmp" "$KDIR"
fi
grep -Eq '^CONFIG_RDMA_RXE=(m|y)' "$KDIR/boot/config-$KVER" || die "kernel $KVER has no rdma_rxe"

# --------------------------------------------------------------------------- guest root
ROOT=$CACHE/rootfs
STAMP="$SUITE $GUEST_PKGS"
if [ "$(cat "$ROOT/.stamp" 2>/dev/null)" != "$STAMP" ]; then
  say "debootstrap $SUITE with $GUEST_PKGS (about a minute)"
  rm -rf "$ROOT"
  debootstrap --variant=minbase --include="$GUEST_PKGS" "$SUITE" "$ROOT" "$MIRROR" \
    > "$CACHE/debootstrap.log" 2>&1 || { tail -n 20 "$CACHE/debootstrap.log"; die "debootstrap failed"; }
  rm -rf "$ROOT"/var/cache/apt/* "$ROOT"/var/lib/apt/lists/* "$ROOT"/usr/share/{doc,man,info,locale}
  echo "$STAMP" > "$ROOT/.stamp"
fi

# only the modules the lab loads, with what they depend on
MODDIR=$ROOT/usr/lib/modules/$KVER
if [ "$(cat "$MODDIR/.complete" 2>/dev/null)" != "$GUEST_MODULES" ]; then
  say "copying kernel modules into the guest"
  rm -rf "$ROOT"/usr/lib/modules/*
  mkdir -p "$MODDIR"
  for m in $GUEST_MODULES; do
    modprobe -d "$KDIR" -S "$KVER" --show-depends "$m" | awk '$1 == "insmod" {print $2}'
  done | sort -u | while read -r ko; do
    rel=${ko#"$KDIR/lib/modules/$KVER/"}
    install -D -m 0644 "$ko" "$MODDIR/$rel"
  done
  cp "$KDIR/lib/modules/$KVER"/modules.{order,builtin,builtin.modinfo} "$MODDIR/" 2>/dev/null || true
  depmod -b "$ROOT" "$KVER"
  echo "$GUEST_MODULES" > "$MODDIR/.complete"
fi

# ------------------------------------------------- Python dependencies for the guest (3.11)
SHARE=$CACHE/share         # shared read-only into the guest at /mnt/share
DEPS=$(python3 - "$REPO/pyproject.toml" <<'EOF'
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    print(" ".join(tomllib.load(f)["project"]["dependencies"]))
EOF
) || die "cannot read the dependencies from pyproject.toml (needs python3 >= 3.11 on the host)"
WANT="$DEPS $TEST_TOOLS"
# one folder per set of packages, never changed once made: labs running at once (from other
# checkouts) each read their own while the guest runs
SITE_NAME=site-$(printf '%s' "$WANT" | sha256sum | cut -c1-16)
SITE=$SHARE/$SITE_NAME
if [ ! -f "$SITE/.stamp" ]; then
  say "pip install --target for the guest: $WANT"
  mkdir -p "$SHARE"
  TMP_SITE=$(mktemp -d "$SHARE/.site.XXXXXX")
  PIP_FLAGS=()
  if [ "$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')" != 3.11 ]; then
    # another host Python: fetch the guest's wheels explicitly
    PIP_FLAGS=(--python-version 3.11 --implementation cp --abi cp311 --only-binary=:all:
               --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64)
  fi
  # shellcheck disable=SC2086
  python3 -m pip install -q --disable-pip-version-check --no-warn-script-location --root-user-action=ignore \
    --target "$TMP_SITE" "${PIP_FLAGS[@]}" $WANT || { rm -rf "$TMP_SITE"; die "pip install --target failed"; }
  echo "$WANT" > "$TMP_SITE/.stamp"
  mv -T "$TMP_SITE" "$SITE" 2>/dev/null || rm -rf "$TMP_SITE"  # another lab made it meanwhile
fi

# --------------------------------------------------- the checkout, shared read-only (9p)
# this run's own folder: the checkout, the command and the guest image
mkdir -p "$SHARE"
RUN=$(mktemp -d "$SHARE/run.XXXXXX")
trap 'rm -rf "$RUN"' EXIT
mkdir -p "$RUN/repo"
for p in pyproject.toml README.md src tests tools; do
  [ -e "$REPO/$p" ] && cp -a "$REPO/$p" "$RUN/repo/"
done
for p in ${RXE_CARRY:-}; do
  [ -e "$REPO/$p" ] || die "RXE_CARRY: $p does not exist in $REPO"
  mkdir -p "$RUN/repo/$(dirname "$p")"
  cp -a "$REPO/$p" "$RUN/repo/$p"
done
find "$RUN/repo" -name __pycache__ -prune -exec rm -rf {} +
# compiled here (the guest's Python is 3.11 too): an emulated CPU compiles slowly, and every
# process of a test would compile the package again
python3 -m compileall -q "$RUN/repo/src" "$RUN/repo/tests" >/dev/null || die "compileall failed"
# the compiled core goes beside the sources (the guest's Python is Debian's 3.11 too)
CORE=$("$CORE_PYTHON" -c 'import tensorverbs._core as c; print(c.__file__)') \
  || die "no tensorverbs._core for $CORE_PYTHON (make install builds it)"
cp "$CORE" "$RUN/repo/src/tensorverbs/"
{
  echo 'export RXE_LAB=1'
  for v in $(compgen -e); do
    case $v in
      TENSORVERBS_*|RDMA_*|PYTEST_ADDOPTS|HYPOTHESIS_*) ;;
      *) [[ " ${RXE_PASS_ENV:-} " == *" $v "* ]] || continue ;;
    esac
    printf 'export %s=%q\n' "$v" "${!v}"
  done
  printf 'set --'; printf ' %q' "$@"; printf '\n'
} > "$RUN/command.sh"

# ------------------------------------------------------------------------ guest scripts
# the guest image: this run's scripts (/init, /lab), an uncompressed archive, followed by the
# root filesystem, compressed and packed once (the kernel unpacks both, as it does an early
# microcode archive before an initramfs); without the scripts nothing would boot
BASE=$CACHE/rootfs.cpio.zst
BASE_STAMP="3 $STAMP $KVER $GUEST_MODULES"
if [ ! -f "$BASE" ] || [ "$(cat "$BASE.stamp" 2>/dev/null)" != "$BASE_STAMP" ]; then
  say "packing the guest's root filesystem"
  rm -rf "$ROOT/init" "$ROOT/lab"  # (where earlier versions of this script wrote them)
  TMP_BASE=$(mktemp "$CACHE/.rootfs.XXXXXX")
  (cd "$ROOT" && find . -print0 | cpio --null -o -H newc --quiet | zstd -q -T0 -3 > "$TMP_BASE")
  mv "$TMP_BASE" "$BASE" && echo "$BASE_STAMP" > "$BASE.stamp"
fi
LAB=$RUN/lab
mkdir -p "$LAB/lab"
cat > "$LAB/init" <<'EOF'
#!/bin/sh
# PID 1: mount what a program expects, run the lab, power off.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts pts /dev/pts
for d in /dev/shm /tmp /run; do mount -t tmpfs tmp "$d"; done
/lab/run.sh > /dev/console 2>&1
echo o > /proc/sysrq-trigger
sleep 60
EOF
cat > "$LAB/lab/run.sh" <<'EOF'
#!/bin/sh
# Inside the guest: two rxe devices on a veth pair, the checkout, then the command.
set -u
uptime() { cut -d' ' -f1 /proc/uptime; }
step() { echo "rxe-guest: $* (t=$(uptime)s)"; }
finish() { echo "RXE-LAB-EXIT $1"; exit 0; }
step "kernel $(uname -r), $(nproc) cpus"
echo 1 > /proc/sys/kernel/sysrq
ip link set lo up
echo 0 > /proc/sys/net/ipv6/conf/default/accept_dad
# rxe computes its ICRC with the kernel's "crc32" hash, which crc32_generic provides
for m in crc32_generic rdma_rxe ib_uverbs veth virtio_pci 9pnet_virtio 9p; do
  modprobe "$m" || { echo "rxe-guest: modprobe $m failed"; finish 90; }
done
# nftables, for the tests that drop RoCE packets (they skip where it is missing)
modprobe -q nf_tables && modprobe -q nft_numgen || echo "rxe-guest: no nftables modules"
# a veth hands each packet to its peer's backlog, which drops beyond netdev_max_backlog
# (1000): a RDMA READ's response (up to 8 MiB, 8192 packets) overflows it under the
# emulated CPU, and every retry of the read overflows it again (a livelock real
# fabrics with link-level flow control do not have)
echo 250000 > /proc/sys/net/core/netdev_max_backlog
ip link add veth0 type veth peer name veth1
ip link set veth0 up && ip link set veth1 up
rdma link add rxe0 type rxe netdev veth0 && rdma link add rxe1 type rxe netdev veth1 \
  || { echo "rxe-guest: rdma link add failed"; finish 91; }
for i in $(seq 50); do   # the link-local GID appears once IPv6 is up on the veth
  grep -qv '^0000:0000' /sys/class/infiniband/rxe1/ports/1/gids/0 2>/dev/null && break
  sleep 0.1
done
rdma link show
mkdir -p /mnt/share
# cache=loose: the share does not change while the guest runs, and each process of a test
# imports the same packages (uncached, every stat crosses to the host)
mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288,cache=loose,ro share /mnt/share \
  || { echo "rxe-guest: mounting the share failed"; finish 92; }
if grep -q 'rxe_smoke=1' /proc/cmdline; then
  step "smoke: ibv_rc_pingpong rxe1 -> rxe0"
  timeout 60 ibv_rc_pingpong -d rxe0 -g 0 -n 100 > /tmp/pp.srv 2>&1 &
  sleep 1
  timeout 60 ibv_rc_pingpong -d rxe1 -g 0 -n 100 127.0.0.1 > /tmp/pp.cli 2>&1; c=$?
  wait $!; s=$?
  tail -n 1 /tmp/pp.cli
  [ "$c$s" = 00 ] || { cat /tmp/pp.srv /tmp/pp.cli; echo "rxe-guest: smoke test failed"; finish 93; }
fi
arg() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" /proc/cmdline; }
run=/mnt/share/$(arg rxe_run)
cp -a "$run/repo" /tmp/repo && cd /tmp/repo || finish 94
export PYTHONPATH=/tmp/repo/src:/mnt/share/$(arg rxe_site) PYTHONDONTWRITEBYTECODE=1 PY_COLORS=0 TERM=dumb
. "$run/command.sh"
step "running: $*"
timeout "$(arg rxe_timeout)" "$@"
rc=$?
step "command exited with $rc"
finish $rc
EOF
chmod +x "$LAB/init" "$LAB/lab/run.sh"
(cd "$LAB" && find . -print0 | cpio --null -o -H newc --quiet) > "$RUN/initrd.img"
cat "$BASE" >> "$RUN/initrd.img"

# ----------------------------------------------------------------------------------- boot
case $ACCEL in
  tcg) ACCEL_ARGS=(-accel tcg,thread=multi -cpu max) ;;   # max: PyPI's numpy needs AVX2
  kvm) ACCEL_ARGS=(-enable-kvm -cpu host) ;;
  *) die "RXE_ACCEL must be tcg or kvm, not $ACCEL" ;;
esac
# the command gets less than qemu, so a hung command still ends with its exit status shown
GUEST_TIMEOUT=$(( TIMEOUT > 120 ? TIMEOUT - 60 : TIMEOUT / 2 ))
# a kernel worker that spins (a soft lockup: rdma_rxe under emulation, seen once in a
# CI run, stuck for good) panics the guest, which ends it at once with the worker's stack on
# the console (loglevel 5 shows it), rather than when RXE_TIMEOUT runs out. A worker is
# taken as stuck after 60 s (watchdog_thresh=30), not the default 20: an emulated CPU on a
# host busy with the Python suite may run a long loop of rdma_rxe for over 20 s of wall
# time (both runs of one CI lane panicked at 22 s and 26 s, in tests of failed reads)
# mitigations=off: the guest is a test machine of its own, and its kernel's speculation
# mitigations (retpolines, RSB filling) cost emulated CPUs a quarter of their speed
APPEND="console=ttyS0 rdinit=/init mitigations=off panic=-1 softlockup_panic=1 watchdog_thresh=30 quiet loglevel=5"
APPEND="$APPEND rxe_timeout=$GUEST_TIMEOUT"
APPEND="$APPEND rxe_run=${RUN##*/} rxe_site=$SITE_NAME"
[ "${RXE_SMOKE:-1}" = 1 ] && APPEND="$APPEND rxe_smoke=1"
say "booting the guest ($ACCEL, kernel $KVER): $*"
LOG=$RUN/guest.log
BOOT=$(date +%s)
set +e
timeout "$TIMEOUT" qemu-system-x86_64 "${ACCEL_ARGS[@]}" -smp 2 -m "${RXE_MEMORY:-6144}" -nographic -no-reboot \
  -nic none -virtfs "local,path=$SHARE,mount_tag=share,security_model=none,readonly=on" \
  -kernel "$KDIR/boot/vmlinuz-$KVER" -initrd "$RUN/initrd.img" -append "$APPEND" \
  < /dev/null 2>&1 | sed -u -e 's/\r//g' -e 's/\x1b\[[0-9;?]*[A-Za-z]//g' -e 's/\x1bc//g' | tee "$LOG"
QEMU_RC=${PIPESTATUS[0]}
set -e

RC=$(sed -n 's/^RXE-LAB-EXIT \([0-9]*\)$/\1/p' "$LOG" | tail -n 1)
if [ -z "$RC" ]; then
  [ "$QEMU_RC" = 124 ] && echo "the guest did not finish within RXE_TIMEOUT=${TIMEOUT}s"
  grep -q 'Kernel panic' "$LOG" && echo "the guest's kernel panicked: $(grep -m1 -o 'Kernel panic.*' "$LOG")"
  RC=1
fi
VERDICT=FAIL; [ "$RC" = 0 ] && VERDICT=PASS
echo "rxe-lab: $VERDICT (exit $RC, guest $(( $(date +%s) - BOOT ))s, total $(( $(date +%s) - START ))s)"
exit "$RC"
