"""The Server's block calls: many tensors of one dtype and shape, the rows of one buffer,
sent or received in one call (:class:`BlockCalls`, which :class:`tensorverbs.Server` is;
see :mod:`.rendezvous.blocks`)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from . import arguments as check
from .batch_calls import BatchCalls
from .batches import RecvEntry
from .cluster import TaskName
from .devices import HOST, device_of, host_array
from .errors import InvalidArgumentError, TensorverbsError, from_code, public
from .rendezvous.blocks import Blocks, layout
from .rendezvous.completion import SendHandle
from .rendezvous.sending import EntryFailed

if TYPE_CHECKING:
    from .rendezvous.sending import Sending

#: how many failed entries an error's message lists
_LISTED = 10


class BlockCalls(BatchCalls):
    """The public block calls of a Server."""

    _sending: "Sending"

    @public
    def send_blocks(self, name: str, blocks: Any, to: str, step_id: int = 0, *, index: Any = None) -> SendHandle:
        """Send the rows of ``blocks`` (a numpy array or tensor, C-contiguous; its first
        dimension counts the rows) to task ``to`` in one call: entry ``i`` is row
        ``index[i]`` (row ``i`` without ``index``), sent as tensor ``f"{name}/{i}"``.
        With "grpc+verbs" the rows are registered once for the batch and no Python object
        is made per entry. One handle for the batch: done once the receiver has every
        block, failed if any block's send failed. Like :meth:`send`, the rows are sent as
        they are when the receiver takes them: leave them alone until the handle is done.
        A block that cannot be sent raises its error naming it; the blocks before it were
        sent."""
        self._check_running()
        if not isinstance(to, (str, TaskName)):
            raise InvalidArgumentError(f"to must be one task's name: blocks go to one task, not {to!r}")
        if device_of(blocks) is not HOST:
            raise InvalidArgumentError(f"blocks is on {device_of(blocks).name}: blocks are sent from host memory "
                                       "(send_many of rows reaches a device's tensors)")
        value, _ = host_array(blocks, HOST)
        batch = layout(name, np.asarray(value), index, "blocks")
        try:
            return self._sending.send_blocks(batch, to, step_id)
        except EntryFailed as failed:
            raise from_code(int(failed.error.code), f"block {failed.index} ({batch.entry(failed.index)!r} to {to}): "
                                                    f"{failed.error.message}") from None

    @public
    def recv_blocks(self, name: str, source: str, out: Any, step_id: int = 0, *, index: Any = None,
                    timeout: float | None = None, return_exceptions: bool = False) -> dict[int, TensorverbsError]:
        """Receive blocks ``f"{name}/{i}"`` from ``source`` into the rows of ``out`` (a
        numpy array or tensor in host memory, C-contiguous and writable; its first dimension
        counts the rows) in one call: entry ``i`` lands in row ``index[i]`` (row ``i``
        without ``index``), for every ``i`` below ``len(index)`` (``len(out)``). A block must
        have out's dtype and one row's shape; one that has not fails its entry and is kept
        for the next recv of it. With "grpc+verbs" the batch goes to the core in one call,
        the GIL released once, with no Python object per entry.

        Returns the entries that failed, ``{i: error}`` (empty once every block landed) when
        ``return_exceptions``; otherwise raises the first failed entry's error, naming how
        many failed, with the dict as its ``errors``. ``timeout`` holds for every entry.
        Interrupted (Ctrl-C) while it waits, every block that came is kept for the next recv
        of it (a copy of one that had landed in its row), as a batch of recvs keeps its
        tensors. A row takes one block: an index that names one twice is refused."""
        self._check_running()
        return_exceptions = check.flag(return_exceptions, "return_exceptions")
        seconds = check.optional_seconds(timeout, "timeout")
        step = check.integer(step_id, "step_id")
        if device_of(out) is not HOST:
            raise InvalidArgumentError(f"out is on {device_of(out).name}: blocks land in host memory "
                                       "(recv_many with out= views reaches a device's buffer)")
        batch = layout(name, HOST.landing(out), index, "out")
        key, local = self._keys.recv(name, source)
        errors = self._rendezvous.recv_blocks(key, step, batch, seconds)
        if errors is None:  # each block its own recv
            results = self.recv_many([RecvEntry(batch.entry(i), source, step, batch.array[row, ...])
                                      for i, row in enumerate(batch.rows.tolist())], timeout, return_exceptions=True)
            errors = [(i, r) for i, r in enumerate(results) if isinstance(r, TensorverbsError)]
        elif local:
            self._rt.counters.add("local_recvs", len(batch) - len(errors))
        failed = dict(errors)
        if failed and not return_exceptions:
            raise _first(batch, source, step, failed)
        return failed


def _first(batch: Blocks, source: str, step: int, failed: dict[int, TensorverbsError]) -> TensorverbsError:
    """The error of a batch of which ``failed`` failed: the first's, naming how many did."""
    i, first = next(iter(failed.items()))
    listed = ", ".join(map(str, list(failed)[:_LISTED])) + (", ..." if len(failed) > _LISTED else "")
    others = f"; {len(failed)} of {len(batch)} blocks failed: {listed}" if len(failed) > 1 else ""
    error = from_code(int(first.code), f"block {i} ({batch.entry(i)!r} from {source} at step {step}): "
                                       f"{first.message}{others}")
    error.errors = failed  # type: ignore[attr-defined]
    return error
