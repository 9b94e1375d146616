"""The Server's batch recvs: many keys in one call, a result or an error per entry
(:class:`BatchCalls`, which :class:`tensorverbs.Server` is; see :mod:`.batches`)."""
from __future__ import annotations

import concurrent.futures
from typing import Any, Callable, Iterable

from . import arguments as check
from . import batches
from .batches import RecvEntry
from .errors import public
from .recv_calls import RecvCalls


class BatchCalls(RecvCalls):
    """The public batch recv calls of a Server."""

    @public
    def recv_many(self, entries: Iterable[RecvEntry | tuple[Any, ...]], timeout: float | None = None, *,
                  return_exceptions: bool = False, device: str | None = None, dtype: Any = None,
                  tensor_type: str | None = None) -> list[Any]:
        """Receive many tensors in one call: each entry a :class:`tensorverbs.RecvEntry`
        (name, source, step_id, out) or a tuple of them; ``timeout`` and the keywords hold
        for every entry (see :meth:`recv_async`). Once every entry has settled, the results
        in entry order. With ``return_exceptions`` a failed entry holds its
        TensorverbsError; otherwise the first failed entry's error is raised, naming all
        that failed, its ``results`` holding what each entry ended with. Interrupted, every
        tensor is kept for the next recv of it."""
        return_exceptions = check.flag(return_exceptions, "return_exceptions")
        batch = batches.entries(entries, RecvEntry)
        if (device is None and all(e.out is None for e in batch) and self._results(None, dtype, tensor_type) is None
                and not self._rt.relays.followed()):
            self._check_running()
            seconds = check.optional_seconds(timeout, "timeout")
            keys, steps, local = batches.keys(batch, self._keys)
            results = self._rendezvous.recv_many(keys, steps, seconds)  # at once, where the protocol can
            if results is not None:
                if local:
                    self._rt.counters.add("local_recvs", local)
                return batches.Outcomes(batch, results).settle(return_exceptions)
        start_one = self._starter(timeout, device, dtype, tensor_type)
        return batches.run(batch, start_one).settle(return_exceptions)

    @public
    def recv_many_async(self, entries: Iterable[RecvEntry | tuple[Any, ...]], timeout: float | None = None, *,
                        device: str | None = None, dtype: Any = None,
                        tensor_type: str | None = None) -> list[concurrent.futures.Future[Any]]:
        """Start the recvs of :meth:`recv_many`: their futures, in entry order."""
        return self._start_many(entries, timeout, device, dtype, tensor_type)[1]

    @public
    async def arecv_many(self, entries: Iterable[RecvEntry | tuple[Any, ...]], timeout: float | None = None, *,
                         return_exceptions: bool = False, device: str | None = None, dtype: Any = None,
                         tensor_type: str | None = None) -> list[Any]:
        """:meth:`recv_many` in asyncio, without blocking the event loop; cancelling the
        awaiting task gives every recv up, each tensor kept for the next recv of it."""
        return_exceptions = check.flag(return_exceptions, "return_exceptions")
        batch, futures = self._start_many(entries, timeout, device, dtype, tensor_type)
        return (await batches.await_all(batch, futures)).settle(return_exceptions)

    def _start_many(self, entries: Iterable[Any], timeout: float | None, device: str | None, dtype: Any,
                    tensor_type: str | None) -> tuple[list[RecvEntry], list[Any]]:
        batch = batches.entries(entries, RecvEntry)
        return batch, self._start_batch(batch, timeout, device, dtype, tensor_type)

    def _start_batch(self, batch: list[RecvEntry], timeout: float | None, device: str | None, dtype: Any,
                     tensor_type: str | None) -> list[Any]:
        return batches.start(batch, self._starter(timeout, device, dtype, tensor_type))

    def _starter(self, timeout: float | None, device: str | None, dtype: Any,
                 tensor_type: str | None) -> Callable[[RecvEntry], concurrent.futures.Future[Any]]:
        """What starts one entry's recv (a ``recv_async`` with the batch's keywords)."""
        timeout = check.optional_seconds(timeout, "timeout")
        return lambda e: self.recv_async(e.name, e.source, e.step_id, timeout, device, e.out, dtype=dtype,
                                         tensor_type=tensor_type)
