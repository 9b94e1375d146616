"""A network at its worst between two hosts, with the same processes throughout: packet
loss, a short outage, and a partition longer than the liveness timeout. Every pending recv
ends (with its tensor, bytes right, or a TensorverbsError) and traffic resumes."""
from __future__ import annotations

import concurrent.futures
import time

import pytest

import tensorverbs as tv
from tensorverbs.local_cluster import pattern, same
from tensorverbs.rpc.options import KEEPALIVE_MS, KEEPALIVE_TIMEOUT_MS, LIVENESS_SECONDS as LIVENESS

from nft import unavailable_reason
from two_hosts import Hosts, wait_until
from training import PS, WORKER

REASON = unavailable_reason()
pytestmark = [pytest.mark.netns, pytest.mark.skipif(REASON is not None, reason=REASON or "")]

#: slack on every bound below (a busy 2-core machine)
SLACK = 10.0
OUTAGE = 3.0
#: the recv timeout of the recvs pending across a fault: far beyond the bounds below,
#: so that a recv that learns nothing of the heal fails its bound, not its timeout
PENDING_TIMEOUT = 45.0
NBYTES = 256 << 10


def _pending_recvs(hosts: Hosts, tag: str, count: int) -> tuple[int, dict[str, concurrent.futures.Future]]:
    """(step, recvs of ``count`` tensors from the ps), waiting at the ps for their tensors."""
    step = next(hosts.steps)
    futures = {f"{tag}{i}": hosts.worker.recv_async(f"{tag}{i}", source=PS, step_id=step,
                                                    timeout=PENDING_TIMEOUT)
               for i in range(count)}
    hosts.ps.call("wait_waiters", count)
    return step, futures


def test_every_step_completes_through_3_percent_loss(hosts_healed: Hosts) -> None:
    hosts = hosts_healed
    hosts.train(1)
    hosts.faults.lose(3)
    hosts.train(20)
    assert hosts.faults.dropped() > 0, "the loss rules dropped nothing"


def test_pending_recvs_end_soon_after_a_3_s_outage(hosts_healed: Hosts) -> None:
    """Recvs wait at the ps; a third of their tensors leave before the outage, a third
    during it, a third after it. Each recv ends soon after the heal, with the right bytes
    or a TensorverbsError, and the next steps run."""
    hosts = hosts_healed
    hosts.train(1)
    step, futures = _pending_recvs(hosts, "o", 6)
    names = list(futures)

    def send(first: int, last: int) -> None:
        for seed in range(first, last):
            hosts.ps.call("send_pattern", names[seed], WORKER, step, NBYTES, seed)

    send(0, 2)
    hosts.faults.cut()
    send(2, 4)
    time.sleep(OUTAGE)  # the fault itself
    hosts.faults.heal()
    healed = time.monotonic()
    send(4, 6)
    bound = LIVENESS + SLACK
    done, pending = concurrent.futures.wait(futures.values(), timeout=bound)
    late = [name for name, fut in futures.items() if fut in pending]
    assert not late, (f"recvs {late} still pending {time.monotonic() - healed:.1f} s after the "
                      f"outage healed (bound {bound:g} s)")
    for seed, (name, fut) in enumerate(futures.items()):
        error = fut.exception()
        if error is None:
            assert same(fut.result(), pattern(NBYTES, seed)), f"{name}: wrong bytes"
        else:
            assert isinstance(error, tv.TensorverbsError), f"{name}: {error!r}"
    hosts.train(3)


def test_a_partition_fails_pending_recvs_then_the_same_processes_reconnect(hosts_healed: Hosts) -> None:
    """A partition longer than the liveness timeout: the recvs pending on both sides fail
    with UnavailableError naming their peer within the timeout; after the heal the same
    processes set their channels up again and the next steps run."""
    hosts = hosts_healed
    hosts.train(1)
    step, futures = _pending_recvs(hosts, "p", 3)
    hosts.ps.post("recv", "q", WORKER, step, PENDING_TIMEOUT)
    wait_until(lambda: hosts.worker.pending()[1] >= 1, SLACK, "the ps's recv reaching the worker")
    hosts.faults.cut()
    cut = time.monotonic()
    bound = LIVENESS + SLACK
    for name, fut in futures.items():
        with pytest.raises(tv.UnavailableError, match="/job:ps/replica:0/task:0"):
            fut.result(timeout=max(0.0, cut + bound - time.monotonic()))
    with pytest.raises(tv.UnavailableError, match="/job:worker/replica:0/task:0"):
        hosts.ps.result(max(0.0, cut + bound - time.monotonic()))
    time.sleep(max(0.0, cut + LIVENESS + 1 - time.monotonic()))  # the partition outlasts liveness
    hosts.faults.heal()
    hosts.train(3)


def test_a_partition_while_tensors_stream_delivers_each_exactly_once(hosts_healed: Hosts) -> None:
    """The link is cut while 200 tensors stream to the worker, for longer than the keepalive
    takes to break the connections (so that tensors that arrived whole lose their
    confirmation with them), then healed: each tensor reaches the worker once: a recv that
    failed gets it when asked again, the ps's flush sees every send delivered, and none
    comes a second time."""
    hosts = hosts_healed
    hosts.train(1)
    step, count = next(hosts.steps), 200
    hosts.ps.call("run", "training:send_many", step, count, NBYTES)
    futures = [hosts.worker.recv_async(f"t{i}", source=PS, step_id=step, timeout=PENDING_TIMEOUT)
               for i in range(count)]
    wait_until(lambda: any(f.done() for f in futures), SLACK, "a first tensor's arrival")
    hosts.faults.cut()
    try:  # a fault of a set length: past the keepalive's ping and its timeout
        time.sleep((KEEPALIVE_MS + KEEPALIVE_TIMEOUT_MS) / 1000 + 1)
    finally:
        hosts.faults.heal()
    failed = []
    for i, fut in enumerate(futures):
        try:
            assert same(fut.result(timeout=PENDING_TIMEOUT + SLACK), pattern(NBYTES, i)), f"t{i}"
        except tv.UnavailableError:
            failed.append(i)
    for i in failed:
        assert same(hosts.worker.recv(f"t{i}", PS, step, timeout=PENDING_TIMEOUT), pattern(NBYTES, i)), f"t{i}"
    hosts.ps.call("flush", PENDING_TIMEOUT)
    again = hosts.worker.recv_many([(f"t{i}", PS, step) for i in range(count)], timeout=1, return_exceptions=True)
    assert [i for i, r in enumerate(again) if not isinstance(r, tv.DeadlineExceededError)] == []
