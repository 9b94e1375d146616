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

import threading
import time

import pytest

import tensorverbs as tv
from tensorverbs.cluster import parse_task
from tensorverbs.errors import Code
from tensorverbs.local_cluster import TaskProcess, pattern, same

from variants import VARIANTS, Pair, start_pair

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


def test_recvs_held_for_a_peer_that_restarted_before_the_channel_was_set_up_again_fail(variant, step):
    """The peer dies and a new process of it starts at its address before this task sets
    the broken channel up again (its health watch has not noticed yet): the set-up asks the
    peer's status afresh, and the recvs held for the dead process fail with
    UnavailableError naming the peer and saying it restarted, instead of being asked of
    the new one (which got one the new process sent under the same name and step)."""
    protocol, env = VARIANTS[variant]
    p = start_pair(protocol, env)
    gate = threading.Event()
    try:
        _exchange(p, step)  # the channel is up, the ps's status known
        held = p.worker.recv_async("x", p.PS, step + 1, timeout=TIMEOUT)
        p.ps.wait_waiters(1)  # the request is in
        channels = p.worker._rendezvous.channels
        loop = p.worker._rt.loop
        for watch in list(channels._watches.values()):  # as if the watch had not noticed yet
            loop.call_soon(watch.cancel)
        loop.call_soon(gate.wait, TIMEOUT)  # the set-up again waits until the new ps serves
        p.ps.kill()
        p.ps = TaskProcess(p.cluster, "ps", 0, protocol, env)
        p.ps.send_pattern("x", p.WORKER, step + 1, 64, 1)  # the new process's tensor of that name
        break_channel(p.worker, p.PS)  # (if the death did not break it already)
        gate.set()
        with pytest.raises(tv.UnavailableError, match=r"/job:ps/replica:0/task:0.*restarted"):
            held.result(TIMEOUT)
        _exchange(p, step + 2)  # the channel to the new process carries tensors
    finally:
        gate.set()
        p.worker.stop()
        p.ps.stop()
