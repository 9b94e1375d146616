"""What only the soft provider promises: key format, same-host choice, connection
set-up failures, progress shared between threads, clean teardown."""
from __future__ import annotations

import os
import threading

import numpy as np
import pytest

from tensorverbs.errors import InvalidArgumentError, NotFoundError, UnavailableError
from tensorverbs.verbs import (
    Access, QPEndpoint, QPState, RdmaConfig, RecvWR, SendWR, WcOpcode, WcStatus, WrOpcode,
    get_provider,
)
from tensorverbs.verbs.soft import memcopy, qp as soft_qp
from tensorverbs.verbs.soft.host import HostIdentity, same_host
from tensorverbs.verbs.soft.keytable import SLOT_BITS
from verbs_pair import Waiting, open_pair


@pytest.fixture
def ctx():
    context = get_provider("soft").open(RdmaConfig(provider="soft"))
    yield context
    context.close()


def test_provider_reports_one_active_device():
    provider = get_provider("soft")
    assert provider.availability()[0]
    [dev] = provider.devices()
    assert dev.name == "soft0" and dev.ports[0].state == "ACTIVE" and dev.ports[0].active_mtu == 4096
    with pytest.raises(NotFoundError, match="rxe0"):
        provider.open(RdmaConfig(device="rxe0"))


def test_keys_are_never_zero_and_differ_in_their_random_bits(ctx):
    pd = ctx.alloc_pd()
    keys = []
    for _ in range(64):
        mr = pd.alloc_mr(64, Access.all())
        keys.append(mr.rkey)
        mr.close()  # the slot is reused, the key is not
    assert 0 not in keys and len(set(keys)) > 60
    assert len({k >> SLOT_BITS for k in keys}) > 60


def test_registration_rules(ctx):
    pd = ctx.alloc_pd()
    with pytest.raises(InvalidArgumentError, match="LOCAL_WRITE"):
        pd.alloc_mr(64, Access.REMOTE_WRITE)
    with pytest.raises(InvalidArgumentError, match="read-only"):
        pd.reg_mr(b"immutable", Access.LOCAL_WRITE)
    assert pd.reg_mr(b"immutable", Access.REMOTE_READ).length == 9


@pytest.mark.parametrize("mine, theirs, expected", [
    ("auto", "auto", True), ("no", "auto", False), ("auto", "no", False), ("yes", "auto", True),
])
def test_same_host_choice_is_symmetric(mine, theirs, expected):
    here = HostIdentity.current()
    assert same_host(here, mine, here, theirs) is expected
    assert same_host(here, theirs, here, mine) is expected


def test_another_host_is_not_the_same_host():
    here = HostIdentity.current()
    other = HostIdentity("another-boot-id", here.net_ns, here.pid_ns)
    assert not same_host(here, "auto", other, "auto")
    assert same_host(here, "yes", other, "auto")


def test_endpoint_of_another_provider_is_refused(ctx):
    pd, cq = ctx.alloc_pd(), ctx.create_cq(8)
    qp = ctx.create_qp(pd, cq, cq, 4, 4)
    with pytest.raises(InvalidArgumentError, match="ibverbs"):
        qp.connect(QPEndpoint("ibverbs", 7, lid=1))
    with pytest.raises(InvalidArgumentError, match="malformed"):
        qp.connect(QPEndpoint("soft", 7, info={"token": "zz"}))


def test_unreachable_peer_is_unavailable(ctx):
    other = get_provider("soft").open(RdmaConfig(provider="soft", same_host="no"))
    pd, cq = other.alloc_pd(), other.create_cq(8)
    endpoint = other.create_qp(pd, cq, cq, 4, 4).endpoint()
    other.close()  # its listener is gone
    endpoint.info["token"] = "ff" * 16  # so that this side dials
    pd, cq = ctx.alloc_pd(), ctx.create_cq(8)
    qp = ctx.create_qp(pd, cq, cq, 4, 4)
    with pytest.raises(UnavailableError, match="cannot reach"):
        qp.connect(endpoint)
    assert qp.state == QPState.INIT


def test_a_peer_that_never_dials_in_fails_the_queue_pair(ctx, monkeypatch):
    monkeypatch.setattr(soft_qp, "ATTACH_TIMEOUT", 0.2)
    pd, cq = ctx.alloc_pd(), ctx.create_cq(8)
    qp = ctx.create_qp(pd, cq, cq, 4, 4)
    silent = get_provider("soft").open(RdmaConfig(provider="soft"))
    try:
        spd, scq = silent.alloc_pd(), silent.create_cq(8)
        endpoint = silent.create_qp(spd, scq, scq, 4, 4).endpoint()
        endpoint.info["token"] = "00" * 16  # the silent side is the one to dial
        qp.connect(endpoint)
        qp.post_recv(RecvWR(1))
        wcs = []
        for _ in range(50):
            wcs += cq.wait(timeout=0.5)
            if wcs:
                break
        assert [(wc.wr_id, wc.status, wc.opcode) for wc in wcs] == \
            [(1, WcStatus.WR_FLUSH_ERR, WcOpcode.RECV)], wcs
        assert "did not connect" in wcs[0].detail and qp.state == QPState.ERR
    finally:
        silent.close()


def test_posting_before_connect_is_an_error_completion(ctx):
    pd, cq = ctx.alloc_pd(), ctx.create_cq(8)
    qp = ctx.create_qp(pd, cq, cq, 4, 4)
    mr = pd.alloc_mr(64, Access.all())
    qp.post_send(SendWR(5, WrOpcode.SEND, [mr.sge()]))
    [wc] = cq.wait(timeout=5)
    assert (wc.wr_id, wc.status, wc.opcode) == (5, WcStatus.LOC_QP_OP_ERR, WcOpcode.SEND)


def test_threads_waiting_on_two_queues_of_one_context_share_the_progress():
    """One thread drives the context's sockets; the other's completions still arrive."""
    a, b = open_pair("soft-tcp")
    try:
        recv_cq = b.ctx.create_cq(64)
        qp2 = b.ctx.create_qp(b.pd, b.cq, recv_cq, 8, 8)
        peer = a.ctx.create_qp(a.pd, a.cq, a.cq, 8, 8)
        qp2.connect(peer.endpoint())
        peer.connect(qp2.endpoint())
        got = []
        waiter = threading.Thread(target=lambda: got.extend(recv_cq.wait(timeout=20)))
        waiter.start()
        src = a.region(1 << 20)
        qp2.post_recv(RecvWR(42, [b.region(1 << 20).sge()]))
        peer.post_send(SendWR(1, WrOpcode.SEND, [src.sge()]))
        waiter.join(timeout=30)
        assert [(wc.wr_id, wc.byte_len) for wc in got] == [(42, 1 << 20)]
    finally:
        a.close()
        b.close()


def test_wake_ends_a_wait_without_timeout(ctx):
    cq = ctx.create_cq(8)
    waiting = Waiting(cq)
    cq.wake()  # whether the waiter is in wait() already or about to be, it returns
    assert waiting.result() == []


def test_closing_leaves_no_files_in_dev_shm():
    before = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    a, b = open_pair("soft-shm")
    a.region(1 << 20)
    a.close()
    b.close()
    after = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    assert after <= before


@pytest.mark.parametrize("n", [0, 1, 4097, memcopy.SPLIT_BYTES + 12345])
def test_copy_small_inline_and_large_split(n):
    src = np.frombuffer(np.random.default_rng(n).bytes(n + 64), np.uint8).copy()
    dst = np.zeros(n + 64, np.uint8)
    memcopy.copy(dst.ctypes.data + 32, src.ctypes.data + 32, n)
    assert np.array_equal(dst[32:32 + n], src[32:32 + n])
    assert not dst[:32].any() and not dst[32 + n:].any()
