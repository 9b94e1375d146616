#!/usr/bin/env bash
# install-deps.sh - the Debian packages that building and testing the native core (csrc/)
# needs: a C++ compiler, cmake and Python's headers where they are missing, GoogleTest,
# clang 14 with its sanitizer and libFuzzer runtimes, rdma-core's headers (the ibverbs
# provider is built where they exist), and as root nftables (the faults suite, which runs
# as root only, drops packets with it). ninja comes from PyPI (the Makefile's .venv).
#
#   tools/install-deps.sh          everything: build, unit tests, faults, sanitizers, fuzzers
#   tools/install-deps.sh build    only what building the Python package needs
#
# As root, apt-get installs what is missing (quietly; nothing to do is fast). Otherwise it
# prints what to install and exits 1 if anything is missing.
# PYTHON: the interpreter the extension module is built for (default python3).
set -euo pipefail

missing=()
need_command() { command -v "$1" >/dev/null || missing+=("$2"); }
need_package() {
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'ok installed' || missing+=("$1")
}

need_command c++ g++
need_command cmake cmake
include=$("${PYTHON:-python3}" -c 'import sysconfig; print(sysconfig.get_path("include"))')
[ -f "$include/Python.h" ] || missing+=(python3-dev)
case ${1:-all} in
  all) for p in libgtest-dev clang-14 libclang-rt-14-dev libibverbs-dev; do need_package "$p"; done
       # the faults suite runs as root only (network namespaces)
       [ "$(id -u)" != 0 ] || need_package nftables ;;
  build) ;;
  *) echo "usage: $0 [build]" >&2; exit 2 ;;
esac

[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "install-deps: missing Debian packages: ${missing[*]}" >&2
  echo "install-deps: as root: apt-get install ${missing[*]}" >&2
  exit 1
fi
echo "install-deps: apt-get install ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
trap 'rm -f "$log"' EXIT
install() { apt-get install -y -qq --no-install-recommends "${missing[@]}" >"$log" 2>&1; }
# a stale package list: update it and try again
install || { apt-get update -qq >"$log" 2>&1 && install; } || { cat "$log" >&2; exit 1; }
