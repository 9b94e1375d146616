"""read_blocks: the rows of another task's RemoteBuffer read one-sided into rows of a buffer
of this task's, in one call whose entries the core posts from two index arrays (the soft
provider on one host and over TCP, ibverbs in the soft-RoCE lane). The owner runs in a
process of its own (tests/remote_buffers.py); every row of out is compared, the rows no
entry names included."""
from __future__ import annotations

import asyncio
import dataclasses

import numpy as np
import pytest

import tensorverbs as tv
from one_sided_pairs import ONE_SIDED_VARIANTS, WAIT, register
from variants import pair_of
from tensorverbs.local_cluster import pattern, same
from tensorverbs.one_sided.access import ROW_WINDOW


@pytest.fixture(scope="module", params=ONE_SIDED_VARIANTS)
def pair(request):
    yield from pair_of(request.param)


def _rows(pair, rows: int, row_floats: int, step: int) -> tuple[tv.RemoteBuffer, np.ndarray]:
    """A buffer of ``rows`` rows of ``row_floats`` float32 the ps registered, and its rows."""
    nbytes = rows * row_floats * 4
    buffer = register(pair, nbytes, step, dtype="float32", shape=(rows, row_floats))
    return buffer, pattern(nbytes, step, np.float32).reshape(rows, row_floats)


def _out(pair, rows: int, row_floats: int, allocated: bool) -> np.ndarray:
    out = (pair.worker.allocate((rows, row_floats), np.float32, one_sided=True) if allocated
           else np.empty((rows, row_floats), np.float32))
    out[...] = -1.0
    return out


def _expected(rows: np.ndarray, out_rows: int, blocks: np.ndarray, index: np.ndarray) -> np.ndarray:
    expected = np.full((out_rows, rows.shape[1]), -1.0, np.float32)
    expected[index] = rows[blocks]
    return expected


#: a row of 3 floats (12 bytes), one just past 4 KiB, one past the queue pair's bounce buffer
ROW_FLOATS = [3, 1025, (256 << 10) // 4 + 3]


@pytest.mark.parametrize("allocated", [True, False], ids=["allocated-out", "own-out"])
@pytest.mark.parametrize("row_floats", ROW_FLOATS)
def test_each_block_lands_in_the_row_its_index_names(pair, step, row_floats, allocated):
    rng = np.random.default_rng(step)
    buffer, rows = _rows(pair, 9, row_floats, step)
    out = _out(pair, 12, row_floats, allocated)
    blocks = np.array([4, 4, 0, 8, 1, 2, 3])  # a block read twice, and runs of rows
    index = rng.permutation(12)[:len(blocks)]
    assert pair.worker.read_blocks(buffer, out, blocks, index=index, timeout=WAIT) is None
    assert same(out, _expected(rows, 12, blocks, index))
    pair.ps.unregister(buffer)


def test_runs_of_rows_and_more_entries_than_a_window_land_whole(pair, step):
    """Rows that follow each other on both sides go as one request; a run broken on one
    side only is two; the entries span several windows of requests."""
    count = 3 * ROW_WINDOW + 17
    buffer, rows = _rows(pair, count, 5, step)
    out = _out(pair, count + 3, 5, True)
    blocks = np.arange(count)
    index = np.concatenate([np.arange(3, 103), np.arange(103, 203)[::-1],  # a run, then none
                            np.random.default_rng(step).permutation(np.arange(203, count + 3))])
    pair.worker.read_blocks(buffer, out, blocks, index=index, timeout=WAIT)
    assert same(out, _expected(rows, count + 3, blocks, index))
    pair.ps.unregister(buffer)


def test_without_an_index_entry_i_lands_in_row_i_and_torch_tensors_are_rows_too(pair, step):
    torch = pytest.importorskip("torch")
    buffer, rows = _rows(pair, 6, 8, step)
    out = torch.full((4, 8), -1.0)
    pair.worker.read_blocks(buffer, out, [5, 0, 3], timeout=WAIT)
    assert same(out.numpy(), _expected(rows, 4, np.array([5, 0, 3]), np.arange(3)))
    pair.ps.unregister(buffer)


def test_an_empty_batch_reads_nothing(pair, step):
    buffer, _ = _rows(pair, 2, 4, step)
    out = _out(pair, 2, 4, False)
    pair.worker.read_blocks(buffer, out, np.array([], np.int64), timeout=WAIT)
    assert (out == -1.0).all()
    pair.ps.unregister(buffer)


def test_a_task_reads_blocks_of_its_own_buffer(pair, step):
    rows = pattern(7 * 16, step, np.float32).reshape(7, 4)
    buffer = pair.worker.register(rows.copy())
    out = _out(pair, 3, 4, False)
    pair.worker.read_blocks(buffer, out, [6, 1, 2], index=[2, 0, 1], timeout=WAIT)
    assert same(out, _expected(rows, 3, np.array([6, 1, 2]), np.array([2, 0, 1])))
    pair.worker.unregister(buffer)


@pytest.mark.parametrize("blocks, index, match", [
    ([0, 9], None, r"blocks\[1\] is 9: .* has 9 rows"),
    ([0, -1], None, r"blocks\[1\] is -1"),
    ([0, 1], [0, 12], r"index\[1\] is 12: out has 12 rows"),
    ([0, 1], [3, 3], r"index\[1\] is 3 again: a row of out takes one block"),
    ([0, 1, 2], [0, 1], "blocks names 3 rows and index 2"),
    ([[0, 1]], None, "blocks must be a 1-D sequence of integers"),
    ([0.5], None, "blocks must be a 1-D sequence of integers"),
    (None, None, "blocks must name the rows of the buffer"),
    (np.array([1 << 63], np.uint64), None, r"blocks\[0\] is 9223372036854775808"),
    (list(range(9)) + [0, 1, 2, 3], None, "blocks names 13 rows and out has 12: one row of out per block"),
])
def test_a_row_either_buffer_lacks_is_refused_before_anything_is_read(pair, step, blocks, index, match):
    buffer, _ = _rows(pair, 9, 4, step)
    out = _out(pair, 12, 4, False)
    with pytest.raises(tv.InvalidArgumentError, match=match):
        pair.worker.read_blocks(buffer, out, blocks, index=index, timeout=WAIT)
    assert (out == -1.0).all()
    pair.ps.unregister(buffer)


def test_an_out_that_is_not_rows_of_writable_host_memory_is_refused(pair, step):
    buffer, _ = _rows(pair, 4, 4, step)
    with pytest.raises(tv.InvalidArgumentError, match="C-contiguous"):
        pair.worker.read_blocks(buffer, np.zeros((4, 8), np.float32)[:, ::2], [0], timeout=WAIT)
    with pytest.raises(tv.InvalidArgumentError, match="first dimension"):
        pair.worker.read_blocks(buffer, np.zeros((), np.float32), [0], timeout=WAIT)
    with pytest.raises(tv.InvalidArgumentError, match="rows are empty"):
        pair.worker.read_blocks(buffer, np.zeros((4, 0), np.float32), [0], timeout=WAIT)
    read_only = np.zeros((4, 4), np.float32)
    read_only.flags.writeable = False
    with pytest.raises(tv.InvalidArgumentError):
        pair.worker.read_blocks(buffer, read_only, [0], timeout=WAIT)
    pair.ps.unregister(buffer)


def test_blocks_of_a_buffer_unregistered_are_not_found_and_the_next_read_works(pair, step):
    buffer, _ = _rows(pair, 4, 4, step)
    pair.ps.unregister(buffer)
    out = _out(pair, 4, 4, False)
    with pytest.raises(tv.NotFoundError, match="cannot be reached|not registered"):
        pair.worker.read_blocks(buffer, out, [0, 1, 2, 3], index=[3, 2, 1, 0], timeout=WAIT)
    again, rows = _rows(pair, 4, 4, step + 1)
    pair.worker.read_blocks(again, out, [0, 1, 2, 3], index=[3, 2, 1, 0], timeout=WAIT)
    assert same(out, rows[::-1])
    pair.ps.unregister(again)


def test_aread_blocks_reads_the_blocks_in_asyncio(pair, step):
    buffer, rows = _rows(pair, 5, 6, step)
    out = _out(pair, 5, 6, True)
    asyncio.run(pair.worker.aread_blocks(buffer, out, [4, 3], index=[0, 1], timeout=WAIT))
    assert same(out, _expected(rows, 5, np.array([4, 3]), np.array([0, 1])))
    pair.ps.unregister(buffer)


def test_a_block_failing_with_windows_outstanding_fails_the_call_and_the_next_read_works(pair, step):
    """A forged descriptor (twice the buffer's bytes): the entries past the real buffer fail
    in the third window of requests while others are outstanding. The call raises, every
    request is accounted for before it returns (nothing of out's is kept registered), and
    the next read goes through a new queue pair."""
    rows = 600
    buffer, expected = _rows(pair, rows, 4, step)
    forged = dataclasses.replace(buffer, nbytes=2 * buffer.nbytes, shape=(2 * rows, 4))
    rng = np.random.default_rng(step)
    blocks = np.concatenate([rng.permutation(rows)[:2 * ROW_WINDOW + 10], rows + rng.permutation(rows)])
    out = _out(pair, len(blocks), 4, False)
    with pytest.raises(tv.NotFoundError, match="cannot be reached"):
        pair.worker.read_blocks(forged, out, blocks, index=rng.permutation(len(blocks)), timeout=WAIT)
    assert pair.worker._one_sided._access._kept == []
    again = _out(pair, rows, 4, False)
    pair.worker.read_blocks(buffer, again, np.arange(rows)[::-1], timeout=WAIT)
    assert same(again, expected[::-1])
    pair.ps.unregister(buffer)
