"""A grpc+verbs recv_async whose channel is not connected yet is started by the server's
event loop once the channel is up, on the loop's thread. Whenever the loop starts it (also
before recv_async has returned to its caller), the future the caller gets is the one the
recv settles, and it stays usable after the recv ended."""
from __future__ import annotations

import concurrent.futures
import gc
import sys
import threading
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


def test_a_callback_added_as_the_loop_starts_the_recv_runs(fresh_pair):
    """A done-callback added while the loop starts the recv (after the future looked
    whether its recv parks answers, before the callback is in its list) still runs when
    the tensor comes. (It does because a recv waiting for its channel already has a
    done-callback of the rendezvous's own, which has the start settle its answer as it
    comes; a start that found no callback would park the answer, and this one would never
    run.)"""
    worker = fresh_pair.worker
    loop_ready, paused, started = threading.Event(), threading.Event(), threading.Event()

    def loop_hook(frame: Any, event: str, arg: Any) -> None:  # on the loop's thread
        name = frame.f_code.co_name
        if event == "call" and name == "_start" and frame.f_code.co_filename.endswith("rendezvous.py"):
            loop_ready.set()  # past its look at the future (which takes the future's lock)
            paused.wait(WAIT)  # until the caller is between its look and its append
        elif event == "return" and name == "settled_by":
            started.set()

    def caller_hook(frame: Any, event: str, arg: Any) -> None:
        if event == "return" and frame.f_code.co_name == "_done_callbacks":  # looked, not appended
            sys.setprofile(None)
            paused.set()
            started.wait(WAIT)

    worker._rt.loop.call_soon(sys.setprofile, loop_hook)
    value = np.arange(1000, dtype=np.float32)
    called = threading.Event()
    try:
        # no timeout: a deadline would add a done-callback of its own first
        fut = worker.recv_async("w", fresh_pair.PS, 1)  # the loop starts it once connected
        assert loop_ready.wait(WAIT), "the loop did not start the recv"
        sys.setprofile(caller_hook)
        try:
            fut.add_done_callback(lambda _: called.set())
        finally:
            sys.setprofile(None)
        assert started.is_set(), "the loop did not start the recv while the callback was added"
        fresh_pair.ps.call("send", "w", value, fresh_pair.WORKER, 1)
        assert called.wait(WAIT), "the callback never ran: the answer stayed parked"
        assert np.array_equal(fut.result(WAIT), value)
    finally:
        worker._rt.loop.call_soon(sys.setprofile, None)
