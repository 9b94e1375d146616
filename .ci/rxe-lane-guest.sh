#!/bin/sh
# Runs inside the soft-RoCE guest of tools/rxe-lab.sh (carried there by .ci/rxe-lane.sh):
# the native core's ibverbs tests (the host-built GoogleTest binary: the guest is the same
# Debian release), then the pytest selection. Fails when either fails, or when no C++
# ibverbs test passed (TENSORVERBS_TEST_REQUIRE_IBVERBS=1 turns "no device" skips into
# failures).
#
#   rxe-lane-guest.sh GTEST_BINARY PYTEST_SELECTION TEST_PATHS
set -u
gtest=$1
select=$2
paths=$3

# the guest's CPUs are emulated (qemu's TCG): tests whose bounds are times scale them so
export TENSORVERBS_TEST_SLOWDOWN=10

echo "rxe lane: C++ ibverbs tests ($gtest)"
# streamed as they run (each test's name first): a test that hangs is the last one named
{ TENSORVERBS_TEST_REQUIRE_IBVERBS=1 "$gtest" --gtest_filter='*Ibverbs*' 2>&1; echo $? > /tmp/gtest.rc; } \
  | tee /tmp/gtest.log
cxx=$(cat /tmp/gtest.rc)
passed=$(sed -n 's/^\[  PASSED  \] \([0-9][0-9]*\) tests\{0,1\}\.$/\1/p' /tmp/gtest.log)
if [ "${passed:-0}" -eq 0 ]; then
  echo "rxe lane: no C++ ibverbs test passed"
  cxx=1
fi
echo "rxe lane: C++ ibverbs tests: exit $cxx, ${passed:-0} passed"

# tests/on_ray: Ray's own integration (a Ray cluster in the guest is beyond its emulated CPUs);
# it runs over the soft provider in the host's suite
echo "rxe lane: pytest $paths -k \"$select\" (tests/on_ray left out: Ray's integration, run on the host)"
# verbose: each test is named as it starts (one that hangs is the last named), and every
# test that took 10 s or more is listed with its time at the end
# shellcheck disable=SC2086  # (the paths are words)
python3 -m pytest -p no:cacheprovider -v -ra --timeout=600 --durations=0 --durations-min=10 \
  $paths -k "$select" --ignore=tests/on_ray
py=$?
echo "rxe lane: C++ exit $cxx, pytest exit $py"
[ "$cxx" = 0 ] && [ "$py" = 0 ]
