"""Blocks: send_blocks / recv_blocks move many tensors of one dtype and shape, the rows of
one buffer, in one call, each row where its index says, an ordinary tensor "<name>/<i>" on
the wire; a failed entry is told apart from the others, a block that does not fit its row
is kept, bad arguments are refused before anything moves. For every protocol variant, the
sender in another process (the native batch path on "grpc+verbs", each block its own recv
elsewhere and before a channel is up)."""
from __future__ import annotations

import concurrent.futures

import numpy as np
import pytest

import tensorverbs as tv
from tensorverbs.devices import get_device
from tensorverbs.local_cluster import pattern, same

from block_senders import paged
from variants import SURFACE_VARIANTS


@pytest.fixture(scope="module", params=SURFACE_VARIANTS)
def variant(request) -> str:
    return request.param


def _rows_hold(out: np.ndarray, rows: list[int], sent: np.ndarray, index: list[int]) -> bool:
    """Whether row rows[i] of ``out`` holds row index[i] of ``sent``, byte for byte."""
    return all(same(out[r], sent[index[i]]) for i, r in enumerate(rows))


@pytest.mark.parametrize("name", ["kv", "kv-again"])  # the first sets the channel up on grpc+verbs
def test_blocks_land_in_the_rows_their_index_names(pair, step, name):
    block, n = (3, 5), 8
    sent_index = list(reversed(range(n)))
    pair.ps.run("block_senders:send_blocks", name, pair.WORKER, step, n, block, "float32", 11, sent_index, None)
    out = np.zeros((12, *block), np.float32)
    rows = [2, 11, 4, 5, 0, 9, 8, 1]
    assert pair.worker.recv_blocks(name, pair.PS, out, step, index=rows, timeout=60) == {}
    assert _rows_hold(out, rows, paged(n, block, "float32", 11), sent_index)
    untouched = [r for r in range(12) if r not in rows]
    assert not out[untouched].any()


def test_blocks_land_in_a_torch_tensor(pair, step):
    torch = pytest.importorskip("torch")
    pair.ps.run("block_senders:send_blocks", "t", pair.WORKER, step, 4, (16,), "float16", 3, None, None)
    out = torch.zeros((4, 16), dtype=torch.float16)
    assert pair.worker.recv_blocks("t", pair.PS, out, step, timeout=60) == {}
    assert same(out.numpy(), paged(4, (16,), "float16", 3))


def test_blocks_and_single_tensors_meet(pair, step):
    nbytes = 96
    pair.ps.run("block_senders:send_rows", "one", pair.WORKER, step, 3, nbytes, 5)  # three plain sends
    out = np.empty((3, nbytes), np.uint8)
    assert pair.worker.recv_blocks("one", pair.PS, out, step, timeout=60) == {}
    assert same(out, paged(3, (nbytes,), "uint8", 5))
    pair.ps.run("block_senders:send_blocks", "two", pair.WORKER, step, 3, (nbytes,), "uint8", 7, None, None)
    for r in (2, 0, 1):  # plain recvs of blocks, in any order
        assert same(pair.worker.recv(f"two/{r}", pair.PS, step, timeout=60), pattern(nbytes, 7 + r))


def test_the_handle_is_done_once_every_block_is_taken(pair, step):
    nbytes = 64 << 10
    handle = pair.worker.send_blocks("h", paged(3, (nbytes,), "uint8", 9), pair.PS, step)
    for r in (0, 1):
        assert pair.ps.call("recv_pattern", f"h/{r}", pair.WORKER, step, nbytes, 9 + r, "uint8", 60)
    assert not handle.done()  # h/2 was not taken
    assert pair.ps.call("recv_pattern", "h/2", pair.WORKER, step, nbytes, 11, "uint8", 60)
    handle.wait(60)
    assert "'h/0..2'" in handle.what


@pytest.mark.parametrize("nbytes, counter", [(4096, "staging_copies"), (64 << 10, "source_registrations")])
def test_a_batch_stages_or_registers_its_rows_once(pair, step, nbytes, counter):
    """Small blocks are copied into registered memory once for the batch (which a peer on
    this host reaches directly), large ones registered once: not once per block."""
    if pair.protocol != "grpc+verbs":
        pytest.skip("grpc registers nothing")
    before = pair.worker.stats()[counter]
    handle = pair.worker.send_blocks("r", paged(8, (nbytes,), "uint8", 3), pair.PS, step)
    for r in range(8):
        assert pair.ps.call("recv_pattern", f"r/{r}", pair.WORKER, step, nbytes, 3 + r, "uint8", 60)
    handle.wait(60)
    assert pair.worker.stats()[counter] - before == 1


def test_small_blocks_spread_over_a_large_buffer_are_gathered_once(pair, step):
    """Two 4 KiB blocks at the ends of a buffer of 256 rows: a copy of the two, not of the
    rows between them."""
    if pair.protocol != "grpc+verbs":
        pytest.skip("grpc stages nothing")
    cache = paged(256, (4096,), "uint8", 21)
    before = pair.worker.stats()
    handle = pair.worker.send_blocks("far", cache, pair.PS, step, index=[255, 0])
    staged = pair.worker.stats()["pool_in_use_bytes"] - before["pool_in_use_bytes"]
    assert 0 < staged < 64 * 4096  # (not the 1 MiB from one to the other)
    assert pair.ps.call("recv_pattern", "far/0", pair.WORKER, step, 4096, 21 + 255, "uint8", 60)
    assert pair.ps.call("recv_pattern", "far/1", pair.WORKER, step, 4096, 21, "uint8", 60)
    handle.wait(60)
    assert pair.worker.stats()["staging_copies"] - before["staging_copies"] == 1


def test_a_failed_entry_is_told_apart_and_the_others_land(pair, step):
    pair.ps.run("block_senders:send_blocks", "p", pair.WORKER, step, 4, (32,), "int32", 1, None, None)
    out = np.zeros((5, 32), np.int32)
    failed = pair.worker.recv_blocks("p", pair.PS, out, step, timeout=1, return_exceptions=True)
    assert list(failed) == [4] and isinstance(failed[4], tv.DeadlineExceededError)
    assert same(out[:4], paged(4, (32,), "int32", 1)) and not out[4].any()
    with pytest.raises(tv.DeadlineExceededError, match=r"block 0 \('p/0'.*2 of 2 blocks failed: 0, 1") as raised:
        pair.worker.recv_blocks("p", pair.PS, out[:2], step + 1, timeout=0.5)
    assert sorted(raised.value.errors) == [0, 1]


def test_a_block_that_does_not_fit_its_row_is_refused_and_kept(pair, step):
    pair.ps.call("send_pattern", "m/0", pair.WORKER, step, 12, 4)  # 12 bytes of uint8
    out = np.zeros((1, 3), np.float32)
    with pytest.raises(tv.InvalidArgumentError, match=r"float32 \(3,\), the sender sent uint8 \(12,\)"):
        pair.worker.recv_blocks("m", pair.PS, out, step, timeout=60)
    assert same(pair.worker.recv("m/0", pair.PS, step, timeout=60), pattern(12, 4))  # kept


def test_blocks_of_this_task_to_itself(pair, step):
    sent = paged(5, (2, 8), "float64", 2)
    handle = pair.worker.send_blocks("self", sent, pair.WORKER, step, index=[4, 3, 2, 1, 0])
    out = np.zeros_like(sent)
    assert pair.worker.recv_blocks("self", pair.WORKER, out, step, index=[0, 1, 2, 3, 4], timeout=60) == {}
    assert same(out, sent[::-1])
    handle.wait(60)


def test_blocks_of_this_task_s_own_are_in_their_rows_before_the_send_is_done(pair, step):
    """A thread waits for the send's handle and overwrites the blocks the moment it is
    done: the rows recv_blocks filled hold the blocks as they were sent (each was copied
    into its row before its send counted as delivered)."""
    sent = paged(32, (1 << 18,), "uint8", 3)
    want = sent.copy()
    handle = pair.worker.send_blocks("overwritten", sent, pair.WORKER, step)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        overwrite = pool.submit(lambda: (handle.wait(60), sent.fill(0xA5)))
        out = np.zeros_like(sent)
        assert pair.worker.recv_blocks("overwritten", pair.WORKER, out, step, timeout=60) == {}
        overwrite.result(60)
    assert same(out, want)


def test_a_block_kept_after_its_recv_refused_it_is_delivered_once(pair, step):
    """A block of this task's own that a recv took, refused and kept counts as delivered
    once, when a recv keeps it: the batch's handle waits for every block."""
    sent = paged(2, (4,), "float32", 8)
    handle = pair.worker.send_blocks("once", sent, pair.WORKER, step)
    with pytest.raises(tv.InvalidArgumentError):
        pair.worker.recv_blocks("once", pair.WORKER, np.zeros((1, 5), np.float32), step, timeout=60)
    assert same(pair.worker.recv("once/0", pair.WORKER, step, timeout=60), sent[0])
    assert not handle.done()  # once/1 was not taken
    assert same(pair.worker.recv("once/1", pair.WORKER, step, timeout=60), sent[1])
    handle.wait(60)


def test_a_one_dimensional_buffer_is_a_batch_of_scalars(pair, step):
    sent = np.arange(6, dtype=np.int64) * 7
    pair.worker.send_blocks("scalars", sent, pair.WORKER, step)
    out = np.zeros(6, np.int64)
    assert pair.worker.recv_blocks("scalars", pair.WORKER, out, step, index=[5, 4, 3, 2, 1, 0], timeout=60) == {}
    assert same(out, sent[::-1])


def test_an_empty_batch_does_nothing(pair, step):
    assert pair.worker.send_blocks("none", np.empty((0, 4), np.float32), pair.PS, step).wait(10) is None
    assert pair.worker.recv_blocks("none", pair.PS, np.empty((0, 4), np.float32), step, timeout=1) == {}


@pytest.mark.parametrize("call, error", [
    (lambda s, p: s.send_blocks("x", np.zeros((2, 2)), [p, p]), "one task's name"),
    (lambda s, p: s.send_blocks("x", np.float32(1), p), "first dimension"),
    (lambda s, p: s.send_blocks("x", np.array([["a"], ["b"]], dtype=object), p), "numeric"),
    (lambda s, p: s.send_blocks("x", np.zeros((2, 2)), p, index=[0, 2]), r"index\[1\] is 2: blocks has 2 rows"),
    (lambda s, p: s.send_blocks("x", np.zeros((2, 2)), p, index=[-1]), r"index\[0\] is -1"),
    (lambda s, p: s.send_blocks("x", np.zeros((2, 2)), p, index=[0.5]), "integers"),
    (lambda s, p: s.send_blocks("x", np.zeros((2, 2)), p, index=[[0]]), "1-D"),
    (lambda s, p: s.send_blocks("x;y", np.zeros((2, 2)), p), "invalid tensor name"),
    (lambda s, p: s.send_blocks("x" * 511, np.zeros((20, 2)), p), "too long for 20 blocks"),
    (lambda s, p: s.recv_blocks("x", p, np.zeros((4, 4))[:, ::2]), "C-contiguous"),
    (lambda s, p: s.recv_blocks("x", p, _read_only()), "writable"),
    (lambda s, p: s.recv_blocks("x", p, get_device("cpu:proxy").from_host(np.zeros((2, 2)))), "host memory"),
    (lambda s, p: s.recv_blocks("x", p, np.zeros((2, 2)), timeout=-1), "timeout"),
    (lambda s, p: s.recv_blocks("x", p, np.zeros((4, 2)), index=[3, 1, 3]), r"index\[2\] is 3 again"),
    (lambda s, p: s.send_blocks("x", np.zeros((2, 2), "S4"), p), "numeric"),
    (lambda s, p: s.send_blocks("x", np.zeros((2, 2), ">f4"), p), "byte order"),
    (lambda s, p: s.recv_blocks("x", p, np.zeros((2, 2), ">f4")), "byte order"),
    (lambda s, p: s.send_blocks("x", get_device("cpu:proxy").from_host(np.zeros((2, 2))), p), "host memory"),
])
def test_bad_arguments_are_refused_before_anything_moves(pair, call, error):
    with pytest.raises(tv.InvalidArgumentError, match=error):
        call(pair.worker, pair.PS)


def _read_only() -> np.ndarray:
    out = np.zeros((2, 2))
    out.setflags(write=False)
    return out


def test_a_source_gone_mid_batch_fails_only_the_blocks_not_sent(fresh_pair, step):
    pair = fresh_pair
    out = np.zeros((6, 64), np.uint8)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        batch = pool.submit(pair.worker.recv_blocks, "g", pair.PS, out, step, timeout=120, return_exceptions=True)
        # the ps sends three of the six, waits until the worker took them, and dies
        assert pair.ps.run("block_senders:send_blocks", "g", pair.WORKER, step, 3, (64,), "uint8", 6,
                           None, 60.0) == "delivered"
        pair.ps.kill()
        failed = batch.result(timeout=120)
    assert sorted(failed) == [3, 4, 5]
    assert all(isinstance(e, tv.UnavailableError) for e in failed.values()), failed
    assert same(out[:3], paged(3, (64,), "uint8", 6))
