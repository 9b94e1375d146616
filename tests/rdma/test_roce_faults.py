"""A lossy and a broken fabric under the ibverbs provider (the soft-RoCE lane): the two
tasks on two rxe devices, so that their RoCE packets (UDP port 4791) pass the kernel's
network stack, where nftables drops them as they arrive (a loss in transit: the sender's
retransmission timer must notice it). Every transfer completes with the right bytes through
3% loss and a 3 s outage. Only the data plane is touched; gRPC keeps its loopback.

Under 3% loss the reliable connection alone is not enough: soft-RoCE counts retries per
work request and resets them only when one completes, so a 256 KiB write (256 packets of
1 KiB, several lost each time) exhausts them within a few transfers and its queue pair goes
to the error state. The channel is then set up again and the recvs pending on it (on either
side) are asked again there (tests/test_channel_recovery.py shows that path on every
provider)."""
from __future__ import annotations

import concurrent.futures
import os
import shutil
import time

import pytest

import tensorverbs as tv
from tensorverbs.local_cluster import TaskProcess, cluster_spec, pattern, same
from tensorverbs.verbs import availability
from tensorverbs.verbs.config import RdmaConfig

import nft
from variants import Pair

_OK, _WHY = availability("ibverbs")
DEVICES = ("rxe0", "rxe1")


def _unavailable() -> str | None:
    if not _OK:
        return f"ibverbs provider unavailable: {_WHY}"
    if not all(os.path.isdir(f"/sys/class/infiniband/{d}") for d in DEVICES):
        return f"needs the devices {' and '.join(DEVICES)} of the soft-RoCE lane"
    if os.geteuid() != 0 or shutil.which("nft") is None:
        return "needs root and nftables"
    return None


REASON = _unavailable()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")

#: the lane's guest emulates its CPUs: the transport's retransmission timeout is 1 s
ENV = {"TENSORVERBS_PROVIDER": "ibverbs", "RDMA_QP_TIMEOUT": "18"}
TIMEOUT = 60.0
OUTAGE = 3.0
SIZES = [4 << 10, 256 << 10]


class RoceFaults:
    """nftables rules of this (the guest's) network namespace that drop RoCE v2 packets as
    they arrive."""

    def set(self, condition: str | None) -> None:
        """Drop the RoCE packets matching ``condition`` ("": all of them; None: none)."""
        nft.replace(None, "" if condition is None else (
            f"  chain in {{ type filter hook input priority 0; udp dport 4791 {condition} counter drop; }}"))

    def dropped(self) -> int:
        return nft.counted(None)


@pytest.fixture(scope="module")
def faults():
    f = RoceFaults()
    yield f
    f.set(None)


@pytest.fixture(scope="module")
def two_devices():
    """ps on rxe0, worker on rxe1."""
    cluster = cluster_spec({"ps": 1, "worker": 1})
    ps = TaskProcess(cluster, "ps", 0, "grpc+verbs", {**ENV, "RDMA_DEVICE": DEVICES[0]})
    try:
        worker = tv.Server(cluster, "worker", 0, "grpc+verbs",
                           config=RdmaConfig.from_env({**ENV, "RDMA_DEVICE": DEVICES[1]}))
    except BaseException:
        ps.stop()
        raise
    yield Pair(ps, worker, "grpc+verbs", ENV, cluster)
    worker.stop()
    ps.stop()


def _steps(p: Pair, first: int, count: int) -> None:
    """``count`` steps of tensors of every size each way, bytes checked."""
    for step in range(first, first + count):
        for i, n in enumerate(SIZES):
            p.ps.send_pattern(f"down{i}", p.WORKER, step, n, step + i)
            p.worker.send(f"up{i}", pattern(n, step + i), to=p.PS, step_id=step)
        for i, n in enumerate(SIZES):
            assert same(p.worker.recv(f"down{i}", p.PS, step, timeout=TIMEOUT), pattern(n, step + i))
            assert p.ps.recv_pattern(f"up{i}", p.WORKER, step, n, step + i, timeout=TIMEOUT)


@pytest.mark.rxe
def test_every_transfer_completes_through_3_percent_loss(two_devices, faults, step):
    p = two_devices
    _steps(p, step * 100, 1)
    writes = p.worker.stats()["rdma_writes"] + p.ps.stats()["rdma_writes"]
    faults.set("numgen random mod 100 < 3")
    try:
        _steps(p, step * 100 + 1, 5)
        assert faults.dropped() > 0, "the loss rule dropped no RoCE packet"
    finally:
        faults.set(None)
    assert p.worker.stats()["rdma_writes"] + p.ps.stats()["rdma_writes"] > writes, "nothing moved over RDMA"


@pytest.mark.rxe
def test_transfers_pending_across_a_3_s_outage_complete(two_devices, faults, step):
    p = two_devices
    base = step * 100
    _steps(p, base, 1)
    futures = {f"o{i}": p.worker.recv_async(f"o{i}", p.PS, base + 1, timeout=TIMEOUT) for i in range(4)}
    p.ps.send_pattern("o0", p.WORKER, base + 1, SIZES[1], 0)
    faults.set("")
    try:
        for i in (1, 2):
            p.ps.send_pattern(f"o{i}", p.WORKER, base + 1, SIZES[1], i)
        time.sleep(OUTAGE)  # the outage itself
        assert faults.dropped() > 0, "the outage dropped no RoCE packet"
    finally:
        faults.set(None)
    p.ps.send_pattern("o3", p.WORKER, base + 1, SIZES[1], 3)
    concurrent.futures.wait(futures.values(), timeout=TIMEOUT)
    for seed, (name, fut) in enumerate(futures.items()):
        assert same(fut.result(timeout=0), pattern(SIZES[1], seed)), f"{name}: wrong bytes"
    _steps(p, base + 2, 2)
