"""A grpc+verbs recv_async whose channel is not connected yet is started by the server's
event loop once the channel is up, on the loop's thread. Whenever the loop starts it (also
before recv_async has returned to its caller), the future the caller gets is the one the
recv settles, and it stays usable after the recv ended."""
from __future__ import annotations

import concurrent.futures
import gc
import sys
from typing import Any

import numpy as np
import pytest

from variants import VARIANTS, pair_of

WAIT = 30.0


@pytest.fixture(params=[name for name in VARIANTS if VARIANTS[name][0] == "grpc+verbs"])
def fresh_pair(request):
    """A pair whose worker has not talked to its ps yet (no channel)."""
    yield from pair_of(request.param)


def _loop_starts_it_before_return(frame: Any, event: str, arg: Any) -> None:
    """A profile hook: as a recv's start (``_begin``) returns to ``recv_async``, wait until
    the recv has ended, so that the loop has started and settled it before the caller gets
    its future (the order a busy machine can produce)."""
    if event == "return" and frame.f_code.co_name == "_begin":
        fut = frame.f_locals.get("fut")
        if isinstance(fut, concurrent.futures.Future):
            concurrent.futures.wait([fut], timeout=WAIT)


def test_a_recv_the_loop_started_before_recv_async_returned_keeps_its_future(fresh_pair):
    value = np.arange(1000, dtype=np.float32)
    fresh_pair.ps.call("send", "w", value, fresh_pair.WORKER, 1)
    sys.setprofile(_loop_starts_it_before_return)
    try:
        fut = fresh_pair.worker.recv_async("w", fresh_pair.PS, 1, timeout=WAIT)
    finally:
        sys.setprofile(None)
    gc.collect()  # nothing else holds the recv's future now: the caller's must be it
    assert isinstance(fut, concurrent.futures.Future)
    assert np.array_equal(fut.result(WAIT), value)
