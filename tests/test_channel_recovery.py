"""A verbs channel that breaks under the transport mid-step: what a queue pair does that gave
up retransmitting on a lossy fabric (RETRY_EXC_ERR), or whose peer side was closed. The
broken side's control plane sets the channel up again; the recvs that were pending on
either side are asked again on the new channel and get their bytes; later steps run on it.

The break is injected into one task's core (``fail_channel(..., transient=True)``: the
channel fails exactly as it does on such a completion error); everything after it (the
peer's side replaced, the set-up over gRPC, the requests asked again) is the real path. The
soft-RoCE lane's lossy-fabric test (tests/rdma/test_roce_faults.py) breaks it with real loss.
"""
from __future__ import annotations

import time

import pytest

from tensorverbs.cluster import parse_task
from tensorverbs.errors import Code
from tensorverbs.local_cluster import pattern, same

from variants import VARIANTS, Pair

VERBS = [name for name, (protocol, _) in VARIANTS.items() if protocol == "grpc+verbs"]
#: inline, written, written in several operations where the device's message size is small
SIZES = {"small": 100, "mid": 64 << 10, "large": 4 << 20}
TIMEOUT = 60.0

_pending: dict = {}  # in a task's process: its recvs in flight, by name


def break_channel(server, peer: str) -> None:
    """(In a task's process.) The channel to ``peer`` breaks under the transport."""
    rendezvous = server._rendezvous
    rendezvous.core.fail_channel(rendezvous.ids[parse_task(peer)], int(Code.UNAVAILABLE),
                                 "the test broke the channel", True)


def start_recvs(server, peer: str, step: int) -> None:
    """(In a task's process.) A recv in flight of each of SIZES from ``peer``."""
    for name in SIZES:
        _pending[name] = server.recv_async(name, peer, step, timeout=TIMEOUT)


def received(server, step: int) -> list[str]:
    """(In a task's process.) The recvs of start_recvs whose bytes are wrong (none: [])."""
    return [name for name, n in SIZES.items() if not same(_pending.pop(name).result(TIMEOUT), pattern(n, step))]


def _until(condition, what: str) -> None:
    """Wait for ``condition`` (polled) up to TIMEOUT."""
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        assert time.monotonic() < deadline, f"{what} within {TIMEOUT:g} s"
        time.sleep(0.005)


@pytest.fixture(scope="module", params=VERBS)
def variant(request) -> str:
    """The pair (conftest's) runs over each grpc+verbs variant."""
    return request.param


def _exchange(p: Pair, step: int) -> None:
    """A tensor each way at ``step``, bytes checked."""
    p.ps.send_pattern("w", p.WORKER, step, 1 << 20, step)
    p.worker.send("g", pattern(1 << 20, step), to=p.PS, step_id=step)
    assert same(p.worker.recv("w", p.PS, step, timeout=TIMEOUT), pattern(1 << 20, step))
    assert p.ps.recv_pattern("g", p.WORKER, step, 1 << 20, step, timeout=TIMEOUT)


@pytest.mark.parametrize("broken", ["worker", "ps"])
def test_recvs_pending_on_a_channel_that_broke_get_their_tensors(pair, step, broken):
    p = pair
    base = step * 10
    _exchange(p, base)  # the channel is up and has carried tensors
    futures = {name: p.worker.recv_async(name, p.PS, base + 1, timeout=TIMEOUT) for name in SIZES}
    p.ps.run(f"{__name__}:start_recvs", p.WORKER, base + 1)
    p.ps.wait_waiters(len(SIZES))  # the worker's requests are in
    _until(lambda: p.worker.pending()[1] >= len(SIZES), "the ps's requests arrived")
    if broken == "worker":
        break_channel(p.worker, p.PS)
    else:
        p.ps.run(f"{__name__}:break_channel", p.WORKER)
    for name, n in SIZES.items():
        p.ps.send_pattern(name, p.WORKER, base + 1, n, base + 1)
        p.worker.send(name, pattern(n, base + 1), to=p.PS, step_id=base + 1)
    for name, n in SIZES.items():
        assert same(futures[name].result(TIMEOUT), pattern(n, base + 1)), f"{name}: wrong bytes"
    assert p.ps.run(f"{__name__}:received", base + 1) == []
    for later in (base + 2, base + 3):  # the new channel carries the next steps
        _exchange(p, later)
    assert p.worker.pending() == (0, 0)
