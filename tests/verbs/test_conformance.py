"""One conformance suite for every verbs provider: "soft-shm", "soft-tcp", "ibverbs".

Real sockets (or devices), real bytes compared; every wait has a timeout. The peer-death
case runs the peer in a process of its own and kills it.
"""
from __future__ import annotations

import hashlib
import multiprocessing
import os
import signal

import numpy as np
import pytest

from tensorverbs.verbs import (
    SGE, Access, QPEndpoint, QPState, RecvWR, SendWR, WcOpcode, WcStatus, WrOpcode,
)
from verbs_pair import IBVERBS_MAX_BYTES, Side, configs, open_pair, serve_peer

SIZES = [0, 1, 4096, 1 << 20, 64 << 20]
GUARD = 64
POISON = 0xEE


def _ids(sizes):
    return [f"{s >> 20}MiB" if s >= 1 << 20 else f"{s}B" for s in sizes]


def _cap(flavor: str, size: int) -> None:
    if flavor.startswith("ibverbs") and size > IBVERBS_MAX_BYTES:
        pytest.skip(f"{size} bytes is over TENSORVERBS_TEST_MAX_BYTES={IBVERBS_MAX_BYTES}")


def _bytes(mr) -> np.ndarray:
    return np.frombuffer(mr.buf, np.uint8)


def _fill_random(mr, seed: int = 1) -> np.ndarray:
    data = _bytes(mr)
    data[:] = np.frombuffer(np.random.default_rng(seed).bytes(len(data)), np.uint8)
    return data


def _poisoned(side: Side, nbytes: int, access: Access = Access.all()):
    mr = side.region(nbytes, access)
    _bytes(mr)[:] = POISON
    return mr


def _untouched(mr) -> bool:
    return bool((_bytes(mr) == POISON).all())


def _sges(mr, size: int, offset: int = 0):
    return [mr.sge(offset, size)] if size else []


# ------------------------------------------------------------------------- data movement
@pytest.mark.parametrize("size", SIZES, ids=_ids(SIZES))
@pytest.mark.parametrize("with_imm", [False, True], ids=["write", "write_imm"])
def test_write(qp_pair, flavor, size, with_imm):
    _cap(flavor, size)
    a, b = qp_pair
    src = a.region(max(size, 1))
    data = _fill_random(src)[:size]
    dst = _poisoned(b, size + 2 * GUARD)
    if with_imm:
        b.qp.post_recv(RecvWR(9))
    opcode = WrOpcode.RDMA_WRITE_WITH_IMM if with_imm else WrOpcode.RDMA_WRITE
    a.qp.post_send(SendWR(1, opcode, _sges(src, size), dst.addr + GUARD, dst.rkey,
                          imm_data=0x12345678))
    [wc] = a.completions(1)
    assert (wc.wr_id, wc.status, wc.opcode) == (1, WcStatus.SUCCESS, WcOpcode.RDMA_WRITE), wc
    if with_imm:
        [rwc] = b.completions(1)
        assert (rwc.wr_id, rwc.status, rwc.opcode, rwc.imm_data, rwc.byte_len) == \
            (9, WcStatus.SUCCESS, WcOpcode.RECV_RDMA_WITH_IMM, 0x12345678, size), rwc
    out = _bytes(dst)
    assert np.array_equal(out[GUARD:GUARD + size], data)
    assert (out[:GUARD] == POISON).all() and (out[GUARD + size:] == POISON).all()


@pytest.mark.parametrize("size", SIZES, ids=_ids(SIZES))
def test_read(qp_pair, flavor, size):
    _cap(flavor, size)
    a, b = qp_pair
    src = b.region(size + 2 * GUARD)
    data = _fill_random(src, seed=2)[GUARD:GUARD + size]
    dst = _poisoned(a, size + GUARD)
    a.qp.post_send(SendWR(2, WrOpcode.RDMA_READ, _sges(dst, size), src.addr + GUARD, src.rkey))
    [wc] = a.completions(1)
    assert (wc.wr_id, wc.status, wc.opcode) == (2, WcStatus.SUCCESS, WcOpcode.RDMA_READ), wc
    out = _bytes(dst)
    assert np.array_equal(out[:size], data) and (out[size:] == POISON).all()


def test_write_into_and_read_from_a_registered_user_buffer(qp_pair):
    """Memory of ``reg_mr`` (not the provider's own) is a target like any other."""
    a, b = qp_pair
    size = 1 << 20
    target = np.full(size + 2 * GUARD, POISON, np.uint8)
    mr = b.pd.reg_mr(target, Access.all())
    src = a.region(size)
    data = _fill_random(src, seed=3)
    b.qp.post_recv(RecvWR(3))
    a.qp.post_send(SendWR(1, WrOpcode.RDMA_WRITE_WITH_IMM, [src.sge()], mr.addr + GUARD, mr.rkey,
                          imm_data=5))
    [rwc] = b.completions(1)
    assert rwc.ok and rwc.imm_data == 5 and rwc.byte_len == size, rwc
    assert np.array_equal(target[GUARD:GUARD + size], data)
    assert (target[:GUARD] == POISON).all() and (target[GUARD + size:] == POISON).all()
    back = _poisoned(a, size)
    a.qp.post_send(SendWR(2, WrOpcode.RDMA_READ, [back.sge()], mr.addr + GUARD, mr.rkey))
    wcs = a.completions(2)
    assert all(wc.ok for wc in wcs), wcs
    assert np.array_equal(_bytes(back), data)


@pytest.mark.parametrize("size", [0, 1, 4096, 1 << 20], ids=_ids([0, 1, 4096, 1 << 20]))
@pytest.mark.parametrize("with_imm", [False, True], ids=["send", "send_imm"])
def test_send_recv(qp_pair, size, with_imm):
    a, b = qp_pair
    src = a.region(max(size, 1))
    data = _fill_random(src, seed=4)[:size]
    rbuf = _poisoned(b, size + GUARD)
    half = size // 2  # a receive of two scatter elements
    b.qp.post_recv(RecvWR(7, [rbuf.sge(0, half), rbuf.sge(half, size - half + GUARD)]))
    opcode = WrOpcode.SEND_WITH_IMM if with_imm else WrOpcode.SEND
    a.qp.post_send(SendWR(3, opcode, _sges(src, size), imm_data=77))
    [wc] = a.completions(1)
    assert (wc.wr_id, wc.status, wc.opcode) == (3, WcStatus.SUCCESS, WcOpcode.SEND), wc
    [rwc] = b.completions(1)
    assert (rwc.wr_id, rwc.status, rwc.opcode, rwc.byte_len) == \
        (7, WcStatus.SUCCESS, WcOpcode.RECV, size), rwc
    if with_imm:
        assert rwc.imm_data == 77
    out = _bytes(rbuf)
    assert np.array_equal(out[:size], data) and (out[size:] == POISON).all()


def test_send_before_the_receive_is_posted_waits_for_it(qp_pair):
    a, b = qp_pair
    src = a.region(4096)
    data = _fill_random(src, seed=5)
    a.qp.post_send(SendWR(1, WrOpcode.SEND, [src.sge()]))
    rbuf = _poisoned(b, 4096)
    b.qp.post_recv(RecvWR(2, [rbuf.sge()]))
    [rwc] = b.completions(1)
    assert rwc.ok and rwc.byte_len == 4096, rwc
    assert a.completions(1)[0].ok
    assert np.array_equal(_bytes(rbuf), data)


def test_send_larger_than_the_receive_fails_on_both_sides(qp_pair):
    a, b = qp_pair
    src = a.region(64)
    rbuf = _poisoned(b, 64)
    b.qp.post_recv(RecvWR(8, [rbuf.sge(0, 16)]))
    a.qp.post_send(SendWR(4, WrOpcode.SEND, [src.sge()]))
    [rwc] = b.completions(1)
    assert (rwc.wr_id, rwc.status, rwc.opcode) == (8, WcStatus.LOC_LEN_ERR, WcOpcode.RECV), rwc
    [wc] = a.completions(1)
    assert wc.wr_id == 4 and wc.opcode == WcOpcode.SEND and not wc.ok, wc
    assert (_bytes(rbuf)[16:] == POISON).all()


def test_write_then_write_with_imm_arrive_in_order(qp_pair, flavor):
    """When the immediate completes, the data of every earlier write is in place."""
    a, b = qp_pair
    big = min(16 << 20, IBVERBS_MAX_BYTES) if flavor.startswith("ibverbs") else 16 << 20
    src_big, src_small = a.region(big), a.region(4096)
    data_big, data_small = _fill_random(src_big, 6), _fill_random(src_small, 7)
    dst_big, dst_small = _poisoned(b, big), _poisoned(b, 4096)
    b.qp.post_recv(RecvWR(1))
    a.qp.post_send(SendWR(1, WrOpcode.RDMA_WRITE, [src_big.sge()], dst_big.addr, dst_big.rkey,
                          signaled=False))
    a.qp.post_send(SendWR(2, WrOpcode.RDMA_WRITE_WITH_IMM, [src_small.sge()], dst_small.addr,
                          dst_small.rkey, imm_data=9))
    [rwc] = b.completions(1)
    assert rwc.ok and rwc.imm_data == 9, rwc
    assert np.array_equal(_bytes(dst_big), data_big)
    assert np.array_equal(_bytes(dst_small), data_small)
    [wc] = a.completions(1)
    assert wc.ok and wc.wr_id == 2, wc


def test_many_outstanding_requests_complete_in_order(flavor):
    depth, count, size = 16, 64, 4096
    a, b = open_pair(flavor, send_depth=depth, recv_depth=count)
    try:
        src = a.region(count * size)
        data = _fill_random(src, 8)
        dst = _poisoned(b, count * size)
        for i in range(count):
            b.qp.post_recv(RecvWR(1000 + i))
        for i in range(count):  # 4x the send queue, without waiting
            a.qp.post_send(SendWR(i, WrOpcode.RDMA_WRITE_WITH_IMM, [src.sge(i * size, size)],
                                  dst.addr + i * size, dst.rkey, imm_data=i))
        assert [wc.wr_id for wc in a.completions(count) if wc.ok] == list(range(count))
        rwcs = b.completions(count)
        assert [(wc.wr_id, wc.imm_data) for wc in rwcs if wc.ok] == \
            [(1000 + i, i) for i in range(count)]
        assert np.array_equal(_bytes(dst), data)
    finally:
        a.close()
        b.close()


# ------------------------------------------------------------------------ protection
@pytest.mark.parametrize("opcode", [WrOpcode.RDMA_WRITE, WrOpcode.RDMA_READ], ids=["write", "read"])
@pytest.mark.parametrize("violation", ["rkey", "bounds", "access"])
def test_remote_access_violation(qp_pair, opcode, violation):
    """REM_ACCESS_ERR at the requester, the target untouched, later requests flushed."""
    a, b = qp_pair
    size = 4096
    missing = Access.REMOTE_WRITE if opcode == WrOpcode.RDMA_WRITE else Access.REMOTE_READ
    access = Access.all() & ~missing if violation == "access" else Access.all()
    target = _poisoned(b, 2 * size, access)
    local = a.region(2 * size)
    _fill_random(local, 9)
    rkey, addr = target.rkey, target.addr
    if violation == "rkey":
        rkey ^= 0x00F00000
    elif violation == "bounds":
        addr += target.length - size // 2  # half inside, half past the end
    a.qp.post_send(SendWR(1, opcode, [local.sge(0, size)], addr, rkey))
    a.qp.post_send(SendWR(2, opcode, [local.sge(size, size)], target.addr, target.rkey))
    first, second = a.completions(2)
    expected = WcOpcode.RDMA_WRITE if opcode == WrOpcode.RDMA_WRITE else WcOpcode.RDMA_READ
    assert (first.wr_id, first.status, first.opcode) == (1, WcStatus.REM_ACCESS_ERR, expected), first
    assert (second.wr_id, second.status, second.opcode) == (2, WcStatus.WR_FLUSH_ERR, expected), second
    assert a.qp.state == QPState.ERR
    assert _untouched(target)


def test_local_sge_outside_its_region_is_a_protection_error(qp_pair):
    a, b = qp_pair
    local = a.region(4096)
    target = _poisoned(b, 8192)
    a.qp.post_send(SendWR(1, WrOpcode.RDMA_WRITE, [SGE(local.addr, 8192, local.lkey)],
                          target.addr, target.rkey))
    [wc] = a.completions(1)
    assert (wc.status, wc.opcode) == (WcStatus.LOC_PROT_ERR, WcOpcode.RDMA_WRITE), wc
    assert _untouched(target)


# ------------------------------------------------------------------------- failures
def test_closing_a_queue_pair_fails_the_peer(qp_pair):
    a, b = qp_pair
    buf = b.region(64)
    a.qp.close()
    b.qp.post_recv(RecvWR(1, [buf.sge()]))
    b.qp.post_send(SendWR(2, WrOpcode.SEND, [buf.sge()]))
    wcs = {wc.wr_id: wc for wc in b.completions(2, timeout=30)}
    assert not wcs[1].ok and wcs[1].opcode == WcOpcode.RECV, wcs
    assert not wcs[2].ok and wcs[2].opcode == WcOpcode.SEND, wcs


def test_killed_peer_fails_outstanding_work(flavor):
    """The peer runs in a process of its own; a one-sided write reaches its memory, then
    it is killed with work outstanding: every request completes in error, none hangs."""
    mp = multiprocessing.get_context("spawn")
    conn, child_conn = mp.Pipe()
    proc = mp.Process(target=serve_peer, args=(flavor, child_conn), daemon=True)
    proc.start()
    provider, cfg_a, _ = configs(flavor)
    a = Side(provider, cfg_a)
    try:
        assert conn.poll(60), "the peer process did not start"
        endpoint, addr, rkey = conn.recv()
        a.qp.connect(QPEndpoint.from_bytes(endpoint))
        conn.send(a.qp.endpoint().to_bytes())
        assert conn.poll(30) and conn.recv() == "ready"
        src = a.region(1 << 20)
        data = _fill_random(src, 10)
        a.qp.post_send(SendWR(1, WrOpcode.RDMA_WRITE_WITH_IMM, [src.sge()], addr, rkey,
                              imm_data=31))
        assert a.completions(1)[0].ok
        assert conn.poll(30)
        assert conn.recv() == (WcStatus.SUCCESS, 31, 1 << 20,
                               hashlib.sha256(data.tobytes()).hexdigest())

        for i in range(4):  # outstanding: receives, and requests the peer never answers
            a.qp.post_recv(RecvWR(100 + i, [src.sge(i * 64, 64)]))
        a.qp.post_send(SendWR(200, WrOpcode.SEND, [src.sge(0, 64)]))
        a.qp.post_send(SendWR(201, WrOpcode.RDMA_WRITE_WITH_IMM, [src.sge(0, 64)], addr, rkey,
                              imm_data=1))
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(30)
        wcs = {wc.wr_id: wc for wc in a.completions(6, timeout=30)}
        assert not any(wc.ok for wc in wcs.values()), wcs
        assert {i: wcs[i].opcode for i in wcs} == {
            100: WcOpcode.RECV, 101: WcOpcode.RECV, 102: WcOpcode.RECV, 103: WcOpcode.RECV,
            200: WcOpcode.SEND, 201: WcOpcode.RDMA_WRITE}
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(10)
        a.close()
