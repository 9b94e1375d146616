"""One-sided access checks what it is given: a read into ``out=`` is as strict as
``recv(..., out=)`` (``out`` of another dtype, or, reading the whole buffer, another shape,
is refused with recv's message naming both, and nothing moves; a part of the buffer is
read by giving ``offset=`` or ``nbytes=``); a write to the task's own buffer goes by the
registration's rights, not the descriptor's; memory an access never saw flushed is never
reused. The owner runs in a process of its own (tests/remote_buffers.py)."""
from __future__ import annotations

import dataclasses
import gc

import numpy as np
import pytest

import tensorverbs as tv
from one_sided_pairs import WAIT, register
from variants import pair_of
from tensorverbs.local_cluster import pattern, same
from tensorverbs.one_sided import access


@pytest.fixture(scope="module")
def pair():
    yield from pair_of("verbs")


def test_an_out_smaller_than_the_buffer_is_refused(pair, step):
    buffer = register(pair, 4096, step, dtype="float32", shape=(32, 32))
    out = np.full(100, -1, np.float32)
    with pytest.raises(tv.InvalidArgumentError,
                       match=r"out expects float32 \(100,\), the buffer holds float32 \(32, 32\)"):
        pair.worker.read(buffer, out, timeout=WAIT)
    assert (out == -1).all()  # out keeps its contents
    with pytest.raises(tv.InvalidArgumentError, match=r"entry 1: .*out expects float32 \(32,\)"):
        pair.worker.read_many([buffer, (buffer, np.empty(32, np.float32))], timeout=WAIT)
    # a part, asked for: its bytes from offset
    assert pair.worker.read(buffer, out, nbytes=400, timeout=WAIT) is out
    assert same(out, pattern(4096, step, np.float32)[:100])
    pair.ps.unregister(buffer)


def test_an_out_of_another_dtype_is_refused_naming_both(pair, step):
    buffer = register(pair, 4096, step, dtype="float32", shape=(1024,))
    for out, offset in [(np.empty(1024, np.float64), 0), (np.empty(512, np.float64), 0),
                        (np.empty(1024, np.int32), 0), (np.empty(16, np.float16), 64)]:
        with pytest.raises(tv.InvalidArgumentError,
                           match=rf"out expects {out.dtype} \({out.shape[0]},\), the buffer holds float32 \(1024,\)"):
            pair.worker.read(buffer, out, offset=offset, timeout=WAIT)
    out = np.empty((2, 512), np.float32)  # the buffer's dtype and bytes: its shape is the buffer's
    with pytest.raises(tv.InvalidArgumentError, match=r"out expects float32 \(2, 512\)"):
        pair.worker.read(buffer, out, timeout=WAIT)
    whole = np.empty(1024, np.float32)
    assert pair.worker.read(buffer, whole, timeout=WAIT) is whole
    assert same(whole, pattern(4096, step, np.float32))
    pair.ps.unregister(buffer)


def test_a_write_to_the_tasks_own_buffer_goes_by_its_registration(pair):
    """A descriptor of the task's own read-only buffer that claims write access (forged,
    or edited) writes nothing: the registration's rights decide, as the transport's do for
    a peer's buffer."""
    array = np.zeros(64, np.uint8)
    buffer = pair.worker.register(array, writable=False)
    with pytest.raises(tv.FailedPreconditionError, match="read-only"):
        pair.worker.write(dataclasses.replace(buffer, writable=True), pattern(64, 1), timeout=WAIT)
    assert (array == 0).all()
    pair.worker.unregister(buffer)


def test_memory_a_read_never_saw_flushed_is_not_reused(pair, step, monkeypatch):
    """A read that ends (here at its deadline) with requests the transport never flushed
    keeps the memory they may still land in: ``out`` allocated for one-sided access and
    dropped by its caller does not return to the pool for the next allocation."""
    nbytes = 1 << 20  # read straight into out, not through the queue pair's own buffer
    buffer = register(pair, nbytes, step)
    out = pair.worker.allocate(nbytes, np.uint8, one_sided=True)
    assert pair.worker.read(buffer, out, timeout=WAIT) is out  # the queue pair is up
    monkeypatch.setattr(access, "FLUSH_SECONDS", 0.0)  # no wait for the flush: never seen
    with pytest.raises(tv.DeadlineExceededError):
        pair.worker.read(buffer, out, timeout=0)
    where = out.__array_interface__["data"][0]
    del out
    gc.collect()
    again = pair.worker.allocate(nbytes, np.uint8, one_sided=True)
    assert again.__array_interface__["data"][0] != where
    pair.ps.unregister(buffer)
