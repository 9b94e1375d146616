"""The verbs context of a task's one-sided access: opened on first use with the task's
verbs settings (its own device context, apart from the protocol's channels), with one
protection domain for the buffers it registers and the queue pairs that reach them, and the
memory it allocates for them (:meth:`VerbsContext.allocate`): registered once, and on one
host shared memory, which peers' accesses copy from and to directly (other memory takes
the soft provider's stream)."""
from __future__ import annotations

import collections
import threading
import weakref
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from .. import _core

if TYPE_CHECKING:
    from ..verbs.config import RdmaConfig

#: completions a queue pair of one-sided access may have outstanding
QUEUE_DEPTH = 64
#: how much freed memory of :meth:`VerbsContext.allocate` waits for reuse (registered and
#: faulted in already: a large read's result needs neither again)
CACHED_BYTES = 1 << 30


def size_class(nbytes: int) -> int:
    """The size :meth:`VerbsContext.allocate` allocates for ``nbytes``: the next power of
    two, at least a page."""
    return max(4096, 1 << (max(1, nbytes) - 1).bit_length())


class VerbsContext:
    """The context, protection domain and provider name, opened by :meth:`open`."""

    def __init__(self, config: "RdmaConfig", listen_host: str, bind_host: str) -> None:
        self._config, self._listen_host, self._bind_host = config, listen_host, bind_host
        self._lock = threading.Lock()
        self.context: _core.Context | None = None
        self.pd: _core.ProtectionDomain
        self.provider = ""
        #: memory allocated here that is alive: its address -> (length, region)
        self._allocated: dict[int, tuple[int, Any]] = {}
        #: memory allocated here that is free again, by size class (at most CACHED_BYTES)
        self._free: dict[int, list[Any]] = {}
        self._free_bytes = 0
        #: addresses of regions whose array died, not reaped yet (:meth:`_freed`)
        self._released: collections.deque[int] = collections.deque()

    def open(self) -> "VerbsContext":
        """Itself, opened (at the first call; the provider's errors as TensorverbsErrors)."""
        with self._lock:
            if self.context is None:
                context = _core.open_context(listen_host=self._listen_host,
                                             config=self._config.to_core(self._bind_host))
                self.pd = context.alloc_pd()
                self.provider = context.device["provider"]
                self.context = context
        return self

    def queue_pair(self, send_wr: int, cq: _core.CompletionQueue | None = None
                   ) -> tuple[_core.QueuePair, _core.CompletionQueue]:
        """A new queue pair completing on ``cq``, or on a completion queue of its own."""
        assert self.context is not None
        cq = cq or self.completion_queue()
        return self.context.create_qp(self.pd, cq, cq, send_wr, 1), cq

    def completion_queue(self, depth: int = QUEUE_DEPTH) -> _core.CompletionQueue:
        """A new completion queue of ``depth`` entries."""
        assert self.context is not None
        return self.context.create_cq(depth)

    def allocate(self, nbytes: int) -> np.ndarray:
        """``nbytes`` of memory of this context's (a flat uint8 array; the memory lives as
        long as an array over it, then waits for the next allocation of its size class)."""
        size = size_class(nbytes)
        with self._lock:
            self._reap_locked()
            free = self._free.get(size)
            region = free.pop() if free else None
            if region is not None:
                self._free_bytes -= size
        if region is None:
            region = self.open().pd.allocate_memory(size, _core.LOCAL_WRITE)
        array = np.frombuffer(cast(Any, region.buffer), np.uint8, nbytes)
        with self._lock:
            self._allocated[region.addr] = (region.length, region)
        weakref.finalize(array, self._freed, region.addr)
        return array

    def _freed(self, addr: int) -> None:
        """The array over the region at ``addr`` died. This runs in the garbage collector,
        which may run in any thread at any allocation, this class's locked sections
        included: it takes no lock, and the next allocation reaps the region."""
        self._released.append(addr)

    def _reap_locked(self) -> None:
        """Freed regions to the free lists (up to CACHED_BYTES), or dropped."""
        while self._released:
            length, region = self._allocated.pop(self._released.popleft())
            if self._free_bytes + length <= CACHED_BYTES:
                self._free.setdefault(length, []).append(region)
                self._free_bytes += length

    def region_of(self, addr: int, nbytes: int) -> Any:
        """The region :meth:`allocate` made that holds ``[addr, addr + nbytes)``, or None."""
        with self._lock:
            self._reap_locked()
            for start, (length, region) in self._allocated.items():
                if start <= addr and addr + nbytes <= start + length:
                    return region
        return None
