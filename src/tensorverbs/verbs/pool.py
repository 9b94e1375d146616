"""RegisteredPool: tensors allocated inside large blocks registered once.

Registering memory is slow (it pins pages and programs the device), so the pool
registers one large block and carves allocations out of it (the seeds' allocator
visitor, the paper's memory pool); it grows by registering further blocks up to a limit
and raises ResourceExhaustedError past it. An allocation is handed out as a numpy array
viewing pool memory; its space returns to the pool when the last view of it is gone
(reference counting, no cycle, no wait for the garbage collector), so a training loop
reuses the same warm, already mapped pages step after step.
"""
from __future__ import annotations

import bisect
import collections
import threading
import weakref
from dataclasses import dataclass

import numpy as np

from ..errors import InvalidArgumentError, ResourceExhaustedError
from .api import MemoryRegion, ProtectionDomain
from .model import Access

ALIGN = 64


class _Block:
    """One registered block and its free ranges (sorted, coalesced)."""

    def __init__(self, mr: MemoryRegion) -> None:
        self.mr = mr
        self.starts = [0]           # offsets of free ranges
        self.sizes = {0: mr.length}  # offset -> size
        self.in_use = 0

    def take(self, size: int) -> int | None:
        for start in self.starts:
            free = self.sizes[start]
            if free >= size:
                i = bisect.bisect_left(self.starts, start)
                del self.starts[i]
                del self.sizes[start]
                if free > size:
                    bisect.insort(self.starts, start + size)
                    self.sizes[start + size] = free - size
                self.in_use += size
                return start
        return None

    def give(self, offset: int, size: int) -> None:
        self.in_use -= size
        i = bisect.bisect_left(self.starts, offset)
        if i < len(self.starts) and offset + size == self.starts[i]:  # merge with the next
            size += self.sizes.pop(self.starts.pop(i))
        if i > 0 and self.starts[i - 1] + self.sizes[self.starts[i - 1]] == offset:  # and the previous
            self.sizes[self.starts[i - 1]] += size
            return
        self.starts.insert(i, offset)
        self.sizes[offset] = size


class _View:
    """Exposes one allocation to numpy; when it dies, the allocation is freed. It holds a
    slice of the region's buffer, so the memory stays mapped while any array views it,
    even past the region's deregistration."""

    __slots__ = ("__array_interface__", "__weakref__", "_keep")

    def __init__(self, mr: MemoryRegion, offset: int, nbytes: int) -> None:
        self._keep = mr.buf[offset:offset + nbytes]
        self.__array_interface__ = {"shape": (nbytes,), "typestr": "|u1",
                                    "data": (mr.addr + offset, False), "version": 3}


@dataclass(frozen=True)
class PoolBuffer:
    """An allocation: ``array`` (uint8) views ``nbytes`` at ``addr`` of region ``mr``."""

    array: np.ndarray
    addr: int
    nbytes: int
    mr: MemoryRegion

    @property
    def lkey(self) -> int:
        return self.mr.lkey

    @property
    def rkey(self) -> int:
        return self.mr.rkey


class RegisteredPool:
    """Allocations from blocks of ``block_bytes`` registered on ``pd``, at most
    ``limit_bytes`` registered in all."""

    def __init__(self, pd: ProtectionDomain, block_bytes: int, limit_bytes: int,
                 access: Access = Access.all()) -> None:
        self.pd, self.block_bytes, self.limit_bytes, self.access = pd, block_bytes, limit_bytes, access
        self._blocks: list[_Block] = []
        self._bounds: list[tuple[int, int, _Block]] = []  # (start addr, end addr, block), sorted
        self._lock = threading.Lock()
        self._freed: collections.deque[tuple[_Block, int, int]] = collections.deque()
        self._registrations = 0
        self._closed = False

    def allocate(self, nbytes: int) -> PoolBuffer:
        """``nbytes`` of registered memory (ResourceExhaustedError past the limit)."""
        if nbytes < 0:
            raise InvalidArgumentError(f"cannot allocate {nbytes} bytes")
        size = max(ALIGN, -(-nbytes // ALIGN) * ALIGN)
        with self._lock:
            self._drain()
            for block in self._blocks:
                offset = block.take(size)
                if offset is not None:
                    break
            else:
                block = self._grow(size)
                offset = block.take(size)
        addr = block.mr.addr + offset
        view = _View(block.mr, offset, nbytes)
        weakref.finalize(view, self._release, block, offset, size)
        return PoolBuffer(np.asarray(view), addr, nbytes, block.mr)

    def _grow(self, size: int) -> _Block:
        length = max(self.block_bytes, size)
        registered = sum(b.mr.length for b in self._blocks)
        if registered + length > self.limit_bytes:
            raise ResourceExhaustedError(
                f"registered-memory pool limit of {self.limit_bytes} bytes reached "
                f"(TENSORVERBS_POOL_LIMIT): cannot allocate {size} bytes, {registered} bytes "
                f"are registered and a block of {length} more would be needed")
        block = _Block(self.pd.alloc_mr(length, self.access))
        self._registrations += 1
        self._blocks.append(block)
        bisect.insort(self._bounds, (block.mr.addr, block.mr.addr + length, block),
                      key=lambda b: b[0])
        return block

    def _release(self, block: _Block, offset: int, size: int) -> None:
        self._freed.append((block, offset, size))
        if self._closed and self._lock.acquire(blocking=False):
            try:
                self._drain()
            finally:
                self._lock.release()

    def _drain(self) -> None:
        """Return freed allocations to their blocks (frees are queued by finalizers, which
        may run in any thread at any time, so they never take the lock themselves)."""
        while self._freed:
            block, offset, size = self._freed.popleft()
            block.give(offset, size)
            if self._closed and block.in_use == 0:
                block.mr.close()

    def region_of(self, addr: int, nbytes: int) -> MemoryRegion | None:
        """The region holding ``[addr, addr + nbytes)``, if the pool's memory does."""
        bounds = self._bounds
        i = bisect.bisect_right(bounds, addr, key=lambda b: b[0]) - 1
        if i >= 0 and bounds[i][0] <= addr and addr + nbytes <= bounds[i][1]:
            return bounds[i][2].mr
        return None

    def stats(self) -> dict[str, int]:
        """registered_bytes, pool_in_use_bytes, registrations (blocks registered)."""
        with self._lock:
            self._drain()
            return {"registered_bytes": sum(b.mr.length for b in self._blocks),
                    "pool_in_use_bytes": sum(b.in_use for b in self._blocks),
                    "registrations": self._registrations}

    def close(self) -> None:
        """Deregister the blocks; a block still viewed by an array is deregistered when its
        last allocation is freed, so no array ever points at unmapped memory."""
        with self._lock:
            self._closed = True
            self._drain()
            for block in self._blocks:
                if block.in_use == 0:
                    block.mr.close()
