"""A tensor larger than 2 GiB (offsets and lengths past 32 bits) over each main protocol."""
from __future__ import annotations

import pytest

from tensorverbs.local_cluster import pattern, same

from variants import VARIANTS, start_pair

NBYTES = (2 << 30) + 4096 + 12  # past 2^31, not a multiple of the chunk sizes


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["grpc", "verbs"])
def test_tensor_over_two_gib(variant):
    protocol, env = VARIANTS[variant]
    p = start_pair(protocol, env)
    try:
        p.ps.send_pattern("huge", p.WORKER, 1, NBYTES, seed=5)
        out = p.worker.recv("huge", source=p.PS, step_id=1, timeout=600)
        assert out.nbytes == NBYTES
        assert same(out, pattern(NBYTES, 5))
        del out
        p.worker.send("back", pattern(NBYTES, 6), to=p.PS, step_id=2)
        assert p.ps.recv_pattern("back", p.WORKER, 2, NBYTES, 6, timeout=600)
    finally:
        p.worker.stop()
        p.ps.stop()
