"""RegisteredPool over the soft provider: carving, growth, the limit, reuse, counters."""
from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

from tensorverbs.errors import ResourceExhaustedError
from tensorverbs.verbs import Access, RdmaConfig, get_provider
from tensorverbs.verbs.pool import ALIGN, RegisteredPool

MiB = 1 << 20


@pytest.fixture
def pd():
    ctx = get_provider("soft").open(RdmaConfig(provider="soft"))
    yield ctx.alloc_pd()
    ctx.close()


@pytest.fixture
def no_gc():
    """Frees must come from reference counting alone, not from the cycle collector."""
    gc.disable()
    yield
    gc.enable()


def test_allocations_are_aligned_disjoint_views_of_one_registered_block(pd):
    pool = RegisteredPool(pd, 4 * MiB, 64 * MiB, Access.all())
    bufs = [pool.allocate(n) for n in (1, 100, 4096, 12345)]
    assert len({b.mr.rkey for b in bufs}) == 1
    spans = sorted((b.addr, b.addr + b.nbytes) for b in bufs)
    assert all(end <= nxt for (_, end), (nxt, _) in zip(spans, spans[1:]))
    for i, b in enumerate(bufs):
        assert b.addr % ALIGN == 0 and b.array.dtype == np.uint8 and b.array.size == b.nbytes
        assert (b.lkey, b.rkey) == (b.mr.lkey, b.mr.rkey)
        assert b.array.ctypes.data == b.addr
        b.array[:] = i + 1
        offset = b.addr - b.mr.addr
        assert bytes(b.mr.buf[offset:offset + b.nbytes]) == bytes([i + 1]) * b.nbytes
        assert pool.region_of(b.addr, b.nbytes) is b.mr
    assert pool.region_of(bufs[0].mr.addr + 4 * MiB - 1, 2) is None
    assert pool.stats()["registrations"] == 1


def test_grows_block_by_block_then_refuses_past_the_limit(pd):
    pool = RegisteredPool(pd, MiB, 4 * MiB, Access.all())
    held = [pool.allocate(700 << 10) for _ in range(3)]
    assert pool.stats() == {"registered_bytes": 3 * MiB, "pool_in_use_bytes": 3 * (700 << 10),
                            "registrations": 3}
    held.append(pool.allocate(300 << 10))  # fits beside an earlier allocation
    assert pool.stats()["registrations"] == 3
    with pytest.raises(ResourceExhaustedError) as err:
        pool.allocate(2 * MiB)
    message = str(err.value)
    assert "TENSORVERBS_POOL_LIMIT" in message and str(4 * MiB) in message and str(2 * MiB) in message
    held.append(pool.allocate(MiB))  # one more block still fits the limit
    assert pool.stats()["registered_bytes"] == 4 * MiB


def test_a_request_larger_than_a_block_gets_a_block_of_its_own(pd):
    pool = RegisteredPool(pd, MiB, 64 * MiB, Access.all())
    big = pool.allocate(5 * MiB + 1)
    assert big.mr.length >= 5 * MiB + 1
    assert pool.stats()["registered_bytes"] == big.mr.length


def test_space_returns_when_the_last_view_dies(pd, no_gc):
    pool = RegisteredPool(pd, MiB, 4 * MiB, Access.all())
    buf = pool.allocate(1000)
    addr = buf.addr
    view = buf.array[10:20].view(np.int16).reshape(5, 1)  # a view of a view
    del buf
    assert pool.stats()["pool_in_use_bytes"] == 1024
    del view
    assert pool.stats()["pool_in_use_bytes"] == 0
    again = pool.allocate(1000)
    assert again.addr == addr  # the same warm memory, reused
    assert pool.stats()["registrations"] == 1


def test_freed_neighbours_coalesce(pd, no_gc):
    pool = RegisteredPool(pd, MiB, MiB, Access.all())
    parts = [pool.allocate(MiB // 4) for _ in range(4)]
    with pytest.raises(ResourceExhaustedError):
        pool.allocate(1)
    del parts[1:3]  # two middle quarters free: half a MiB in one range
    assert pool.allocate(MiB // 2).nbytes == MiB // 2


def test_concurrent_allocate_and_free_leaves_nothing_in_use(pd):
    pool = RegisteredPool(pd, MiB, 16 * MiB, Access.all())
    errors = []

    def churn(seed):
        rng = np.random.default_rng(seed)
        try:
            for _ in range(300):
                buf = pool.allocate(int(rng.integers(1, 64 << 10)))
                buf.array[:] = seed
                assert (buf.array == seed).all()  # nobody else writes here
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=churn, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    assert pool.stats()["pool_in_use_bytes"] == 0


def test_close_keeps_arrays_in_use_valid_until_they_go(pd, no_gc):
    pool = RegisteredPool(pd, MiB, 4 * MiB, Access.all())
    buf = pool.allocate(4096)
    buf.array[:] = 7
    mr, array = buf.mr, buf.array
    del buf
    pool.close()
    assert not mr.closed and (array == 7).all()
    del array
    assert mr.closed
