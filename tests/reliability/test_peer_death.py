"""Peers that die or vanish in the middle of the traffic: every pending call ends with an
error, and no tensor is lost."""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess

import pytest

from tensorverbs.netns import namespace, unavailable_reason
from tensorverbs.cluster import ClusterSpec, parse_task
from tensorverbs.local_cluster import TaskProcess, free_port
from tensorverbs.rpc.peers import REFUSALS_SECONDS, Peers
from together import Cluster
from variants import VARIANTS
from exchanges import PS, worker

WORKER = worker(0)
LARGE = 16 << 20
#: how long a pending recv may take to fail once its peer died
DEATH_BOUND = 10.0
#: the same for a peer whose host vanished (gRPC keepalive: 2 s + 3 s, and slack)
VANISH_BOUND = 15.0


def test_sender_killed_with_40_large_recvs_pending(variant):
    with Cluster({"ps": 1, "worker": 1}, variant) as cluster:
        cluster.run({WORKER: ("exchanges:begin_recvs", "big", PS, 1, 40, None)})
        cluster[PS].call("wait_waiters", 40)
        cluster[PS].post("run", "exchanges:send_many", WORKER, 1, 3, LARGE)  # in flight when killed
        cluster[PS].kill()
        received, unavailable = cluster.run({WORKER: ("exchanges:await_ends", "big", LARGE, DEATH_BOUND)})[WORKER]
        assert unavailable >= 37 and received + unavailable == 40


def test_receiver_killed_mid_transfer_then_restarted(variant):
    """The receiver dies while a tensor is on its way and others wait to be sent; the
    sender keeps every tensor it did not deliver, and the restarted receiver gets them."""
    total = 8
    with Cluster({"ps": 1, "worker": 1}, variant) as cluster:
        cluster.run({WORKER: ("exchanges:begin_recvs", "first", PS, 2, total, None)})
        cluster[PS].call("wait_waiters", total)
        cluster[PS].call("run", "exchanges:send_many", WORKER, 2, 1, LARGE)  # t0, on its way ...
        cluster[WORKER].kill()  # ... when the receiver dies
        for i in range(1, total):
            cluster[PS].call("send_pattern", f"t{i}", WORKER, 2, LARGE, i)
        cluster.start("worker", 0)
        cluster.run({WORKER: ("exchanges:begin_recvs", "again", PS, 2, total, None)})
        # every tensor delivered once, to the first receiver (t0 at most) or the second
        assert cluster[PS].call("run", "exchanges:wait_delivered", total) == (total, 0)
        received = cluster[WORKER].call("run", "exchanges:wait_received", "again", LARGE,
                                        list(range(1, total)))
        assert set(range(1, total)) <= set(received)


def test_receiver_frozen_then_killed_gets_the_tensor_it_never_read(variant):
    """The whole tensor left the sender, but the receiver, frozen, never read it before it
    was killed: its recv never completed, so the tensor goes back to the sender, and the
    restarted receiver gets it."""
    if variant == "verbs":
        pytest.skip("a same-host write completes once the bytes are in the receiver's memory")
    nbytes = 64 << 10  # within the flow-control windows: all of it leaves at once
    with Cluster({"ps": 1, "worker": 1}, variant) as cluster:
        cluster.run({WORKER: ("exchanges:begin_recvs", "frozen", PS, 3, 1, None)})
        cluster[PS].call("wait_waiters", 1)
        os.kill(cluster[WORKER].process.pid, signal.SIGSTOP)
        cluster[PS].call("run", "exchanges:send_many", WORKER, 3, 1, nbytes)
        cluster[PS].call("run", "exchanges:wait_taken")
        cluster[WORKER].kill()
        cluster.start("worker", 0)
        cluster.run({WORKER: ("exchanges:begin_recvs", "thawed", PS, 3, 1, None)})
        assert cluster[WORKER].call("run", "exchanges:wait_received", "thawed", nbytes, [0]) == [0]


def test_receiver_frozen_past_the_keepalive_timeout_ends_its_recvs_cleanly(variant):
    """A receiver frozen for longer than the keepalive timeout, so that its peer drops the
    connection (as the peers of a task overloaded in a set-up storm do): once it runs
    again, each recv it had pending gets its tensor, sent meanwhile, or UnavailableError
    naming the peer; never a bare CANCELLED."""
    if variant != "grpc":
        pytest.skip("the recvs wait in gRPC calls on grpc only")
    count, nbytes = 4, 64 << 10
    with Cluster({"ps": 1, "worker": 1}, variant) as cluster:
        cluster.run({WORKER: ("exchanges:begin_recvs", "thawed", PS, 4, count, None)})
        cluster[PS].call("wait_waiters", count)
        frozen = cluster[WORKER].process.pid
        os.kill(frozen, signal.SIGSTOP)
        try:  # the ps's keepalive gives up on the frozen worker: its calls end there
            cluster[PS].call("run", "exchanges:wait_fewer_waiters", 1)
        finally:
            os.kill(frozen, signal.SIGCONT)
        cluster[PS].call("run", "exchanges:send_many", WORKER, 4, count, nbytes)
        received, unavailable = cluster.run(
            {WORKER: ("exchanges:await_ends", "thawed", nbytes, VANISH_BOUND)})[WORKER]
        assert received + unavailable == count


_NETNS = unavailable_reason()


@pytest.mark.netns
@pytest.mark.skipif(_NETNS is not None, reason=_NETNS or "")
def test_peer_host_vanishes(variant):
    """The ps's host drops off the network (its link goes down): pending recvs from it
    fail within the keepalive bound."""
    with namespace() as ns:
        spec = {"ps": [f"{ns.inner_ip}:{free_port()}"],  # any port: the namespace is empty
                "worker": [f"{ns.host_ip}:{free_port(ns.host_ip)}"]}
        protocol, env = VARIANTS[variant]
        ps = TaskProcess(spec, "ps", 0, protocol, env, netns=ns.name)
        with Cluster({"worker": 1}, variant, spec=spec) as cluster:
            try:
                ps.call("send_pattern", "t0", WORKER, 4, 4096, 0)
                cluster.run({WORKER: ("exchanges:begin_recvs", "far", PS, 4, 3, None)})
                assert cluster[WORKER].call("run", "exchanges:wait_received", "far", 4096, [0]) == [0]
                ps.call("wait_waiters", 2)
                subprocess.run(["ip", "-n", ns.name, "link", "set", ns.inner_link, "down"], check=True)
                received, unavailable = cluster.run(
                    {WORKER: ("exchanges:await_ends", "far", 4096, VANISH_BOUND)})[WORKER]
                assert (received, unavailable) == (1, 2)
            finally:
                ps.kill()


@pytest.mark.netns
@pytest.mark.skipif(_NETNS is not None, reason=_NETNS or "")
def test_a_peer_whose_host_vanished_before_it_answered_again_is_found_gone():
    """A peer reached a moment ago (its channel connected) whose host drops off the network
    before it answers again is taken as gone once the connection breaks (the keepalive) and
    the reconnect window passes, however long the caller would wait for a slow peer: the
    health watch of a channel just set up waits up to the start-up grace period for the
    peer's first answer, and a vanished host held the channel's recvs that long."""
    with namespace() as ns:
        spec = {"ps": [f"{ns.inner_ip}:{free_port()}"],
                "worker": [f"{ns.host_ip}:{free_port(ns.host_ip)}"]}
        ps = TaskProcess(spec, "ps", 0, "grpc", netns=ns.name)
        task = parse_task(PS)

        async def reach_again_after_the_vanish() -> str | None:
            peers = Peers(ClusterSpec(spec), startup_grace=60.0)
            try:
                status = await peers.handshake(task)
                subprocess.run(["ip", "-n", ns.name, "link", "set", ns.inner_link, "down"], check=True)
                return await asyncio.wait_for(
                    peers.answers_again(task, status.incarnation, within=60.0, refusals_for=REFUSALS_SECONDS),
                    VANISH_BOUND)
            finally:
                await peers.close()
        try:
            why = asyncio.run(reach_again_after_the_vanish())
            assert why is not None and "connection broke" in why
        finally:
            ps.kill()
