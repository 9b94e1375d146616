"""Several links between two hosts (network namespaces joined by several veth pairs):
with TENSORVERBS_LINKS on both, a large tensor is striped over every link both have and
arrives whole; small ones stay on the first link; a task whose peer has no links uses its
one link as before; a link cut in the middle of a tensor costs the tensor nothing (it
comes whole, once), the tensors after it go over the links left, and once the link is
healed it rejoins (dialed again in the background) and carries its share again."""
from __future__ import annotations

import secrets
import threading
import time

import pytest

from tensorverbs.local_cluster import TaskProcess
from tensorverbs.netns import LinkedHost, Namespace, linked_pair, tx_bytes
from nft import Faults, unavailable_reason

pytestmark = pytest.mark.netns
_REASON = unavailable_reason()


def _tasks(a: LinkedHost, b: LinkedHost, links_a: bool, links_b: bool) -> tuple[TaskProcess, TaskProcess]:
    cluster = {"a": [f"{a.ips[0]}:23456"], "b": [f"{b.ips[0]}:23457"]}
    token = secrets.token_hex(16)  # (tasks on routable addresses)

    def env(host: LinkedHost, links: bool) -> dict[str, str]:
        return {"TENSORVERBS_PROVIDER": "soft", "TENSORVERBS_TOKEN": token,
                **({"TENSORVERBS_LINKS": ",".join(host.ips[1:])} if links else {})}
    ta = TaskProcess(cluster, "a", 0, "grpc+verbs", env(a, links_a), netns=a.name)
    try:
        tb = TaskProcess(cluster, "b", 0, "grpc+verbs", env(b, links_b), netns=b.name)
    except BaseException:
        ta.stop()
        raise
    return ta, tb


def _sent(host: LinkedHost) -> list[int]:
    return [tx_bytes(host, link) for link in range(len(host.ips))]


@pytest.mark.skipif(_REASON is not None, reason=_REASON or "")
def test_a_large_tensor_is_striped_over_every_link_and_arrives_whole():
    with linked_pair(3) as (a, b):
        ta, tb = _tasks(a, b, True, True)
        try:
            for step, nbytes in enumerate([(8 << 20) + 3, 4096, 1 << 20, (8 << 20) + 3]):
                before = _sent(b)
                tb.send_pattern("t", "/job:a/task:0", step, nbytes, seed=step)
                assert ta.recv_pattern("t", "/job:b/task:0", step, nbytes, step, timeout=60)
                carried = [after - was for after, was in zip(_sent(b), before)]
                if nbytes >= 8 << 20:  # a fair share on each link
                    assert all(bytes_ >= nbytes // 6 for bytes_ in carried), carried
                elif nbytes == 4096:  # the first link only (the others: at most an ARP)
                    assert carried[0] >= 4096 and max(carried[1:]) < 1024, carried
            ta.send_pattern("u", "/job:b/task:0", 9, 8 << 20, seed=9)  # and the other way
            assert tb.recv_pattern("u", "/job:a/task:0", 9, 8 << 20, 9, timeout=60)
        finally:
            tb.stop()
            ta.stop()


@pytest.mark.skipif(_REASON is not None, reason=_REASON or "")
def test_a_peer_without_links_is_reached_over_the_first_link_alone():
    with linked_pair(2) as (a, b):
        ta, tb = _tasks(a, b, True, False)
        try:
            before = _sent(b)
            tb.send_pattern("t", "/job:a/task:0", 1, 8 << 20, seed=1)
            assert ta.recv_pattern("t", "/job:b/task:0", 1, 8 << 20, 1, timeout=60)
            carried = [after - was for after, was in zip(_sent(b), before)]
            assert carried[0] >= 8 << 20 and carried[1] < 1024, carried
        finally:
            tb.stop()
            ta.stop()


@pytest.mark.skipif(_REASON is not None, reason=_REASON or "")
def test_a_link_cut_in_the_middle_of_a_tensor_loses_nothing_and_rejoins_once_healed():
    nbytes = 48 << 20
    with linked_pair(2, rate="200mbit") as (a, b):
        ta, tb = _tasks(a, b, True, True)
        try:
            tb.send_pattern("t", "/job:a/task:0", 1, nbytes, seed=1)
            got: dict[str, object] = {}

            def recv() -> None:
                try:
                    got["same"] = ta.recv_pattern("t", "/job:b/task:0", 1, nbytes, 1, timeout=120)
                except BaseException as exc:  # (reported below)
                    got["error"] = exc
            receiving = threading.Thread(target=recv)
            receiving.start()
            first = tx_bytes(b, 1)
            deadline = time.monotonic() + 60
            while tx_bytes(b, 1) - first < 4 << 20 and "same" not in got:  # stripes on the second link
                assert time.monotonic() < deadline, "no stripe went over the second link"
                time.sleep(0.005)
            faults = Faults(Namespace(b.name, "", "", b.devices[1]))
            faults.cut()
            receiving.join(150)
            assert not receiving.is_alive()
            assert got.get("same") is True, got
            assert faults.dropped() > 0
            before = _sent(b)  # the next tensor: over the first link, the second left out
            tb.send_pattern("t", "/job:a/task:0", 2, 8 << 20, seed=2)
            assert ta.recv_pattern("t", "/job:b/task:0", 2, 8 << 20, 2, timeout=120)
            carried = [after - was for after, was in zip(_sent(b), before)]
            assert carried[0] >= 8 << 20, carried
            ta.send_pattern("u", "/job:b/task:0", 3, 8 << 20, seed=3)  # and the other way
            assert tb.recv_pattern("u", "/job:a/task:0", 3, 8 << 20, 3, timeout=120)
            cut = tb.stats()
            assert cut["link_breaks"] >= 1 and cut["links_live"] == 0, cut
            faults.heal()  # dialed again (after up to kLinkRedialMost), the link rejoins
            deadline = time.monotonic() + 90
            step = 4
            while True:
                first = tx_bytes(b, 1)
                tb.send_pattern("t", "/job:a/task:0", step, 8 << 20, seed=step)
                assert ta.recv_pattern("t", "/job:b/task:0", step, 8 << 20, step, timeout=120)
                if tx_bytes(b, 1) - first >= 2 << 20:  # its share of a tensor again
                    break
                assert time.monotonic() < deadline, "the healed link did not rejoin"
                step += 1
            healed = tb.stats()
            assert healed["link_rejoins"] >= 1 and healed["links_live"] == 1, healed
        finally:
            tb.stop()
            ta.stop()
