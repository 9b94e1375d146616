#!/usr/bin/env bash
# The soft-RoCE lane: the tests that need real RDMA verbs, run inside a qemu guest with
# two rxe devices (tools/rxe-lab.sh builds and caches the guest, about 2 minutes the
# first time). Exits non-zero when a test fails, when no test ran, or when the guest
# cannot be built or booted.
#
# Selected: every test under tests/ whose id names "ibverbs" or "rxe" -- the ibverbs
# parametrisation of the verbs conformance suite, the ibverbs provider's own tests, and
# any end-to-end test over real verbs (e.g. a grpc+verbs transfer): give such a test
# "ibverbs" in its id (a parameter, the module name) or @pytest.mark.rxe.
#
#   RXE_LANE_SELECT   pytest -k expression (default "ibverbs or rxe")
#   RXE_LANE_SKIP=1   skip the lane (prints why, exits 0)
#   TENSORVERBS_TEST_MAX_BYTES   size cap for transfers in the guest (default 1 MiB)
# and the settings of tools/rxe-lab.sh (RXE_CACHE, RXE_TIMEOUT, ...).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [ "${RXE_LANE_SKIP:-0}" = 1 ]; then
  echo "rxe lane: skipped (RXE_LANE_SKIP=1)"
  exit 0
fi
export TENSORVERBS_TEST_MAX_BYTES=${TENSORVERBS_TEST_MAX_BYTES:-1048576}
export RXE_TIMEOUT=${RXE_TIMEOUT:-1500}
start=$(date +%s)
bash tools/rxe-lab.sh python3 -m pytest -p no:cacheprovider -q -ra --timeout=300 \
  tests -k "${RXE_LANE_SELECT:-ibverbs or rxe}"
rc=$?
echo "rxe lane: exit $rc after $(( $(date +%s) - start ))s"
exit $rc
