"""The Server's one-sided calls: registering a tensor for the job's tasks to read and
write, and reading and writing theirs (:class:`OneSidedCalls`, which
:class:`tensorverbs.Server` is)."""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from .. import arguments as check
from ..errors import InvalidArgumentError, public
from ..torch_interop import as_torch
from .buffer import RemoteBuffer
from .publication import MAX_GRACE_SECONDS, PublicationRef, Published
from .publisher import Publication

if TYPE_CHECKING:
    from . import OneSided


class OneSidedCalls:
    """The public one-sided calls of a Server (its ``_one_sided`` part does the work)."""

    _one_sided: "OneSided"
    tensor_type: str

    def _check_running(self) -> None:
        raise NotImplementedError

    @public
    def register(self, tensor: Any, *, writable: bool = True) -> RemoteBuffer:
        """Open ``tensor`` (a writable, C-contiguous host tensor: a numpy array, a torch CPU
        tensor, anything speaking DLPack) to one-sided access by the job's tasks: the
        returned :class:`RemoteBuffer` (small, serialisable) lets any of them :meth:`read`
        it, and :meth:`write` it unless ``writable`` is False, as RDMA READ/WRITE without
        this task's code taking part, until :meth:`unregister`. The tensor must stay alive
        and unmoved meanwhile; the server keeps a reference to it."""
        self._check_running()
        return self._one_sided.register(tensor, check.flag(writable, "writable"))

    @public
    def unregister(self, buffer: RemoteBuffer) -> None:
        """Revoke ``buffer`` (one this task registered) at once: later accesses fail with
        NotFoundError, and an access under way finishes before this returns, so the
        tensor's memory may then be reused. NotFoundError if it is not registered."""
        self._one_sided.unregister(buffer)

    @public
    def read(self, buffer: RemoteBuffer, out: Any = None, *, offset: int = 0,
             nbytes: int | None = None, timeout: float | None = None) -> Any:
        """Read ``buffer`` (any task's :class:`RemoteBuffer`) one-sided, from byte
        ``offset``: into ``out`` (a writable, C-contiguous tensor, ``out.nbytes`` bytes; on
        a GPU through a host landing) and return it, or without ``out`` into a new array:
        the buffer's dtype and shape for the whole buffer, else ``nbytes`` bytes as a flat
        array of its dtype.
        InvalidArgumentError for a range out of the buffer's bounds; NotFoundError for a
        buffer unregistered (or a forged descriptor); UnavailableError if its task
        restarted or is gone; DeadlineExceededError after ``timeout`` seconds. A failed
        access leaves this task's channels as they were."""
        return self._read(buffer, out, offset, nbytes, timeout, None)

    @public
    async def aread(self, buffer: RemoteBuffer, out: Any = None, *, offset: int = 0,
                    nbytes: int | None = None, timeout: float | None = None) -> Any:
        """:meth:`read` in asyncio, without blocking the event loop (the access waits in
        a thread of the server's). Cancelling the awaiting task gives the access up, and
        nothing lands in ``out`` once the task's CancelledError reaches it."""
        return await self._one_sided.in_thread(
            lambda cancel: self._read(buffer, out, offset, nbytes, timeout, cancel))

    def _read(self, buffer: RemoteBuffer, out: Any, offset: int, nbytes: int | None,
              timeout: float | None, cancel: threading.Event | None) -> Any:
        timeout = check.optional_seconds(timeout, "timeout")
        self._check_running()
        result = self._one_sided.read(buffer, out, offset, nbytes, timeout, cancel)
        return as_torch(result) if out is None and self.tensor_type == "torch" else result

    @public
    def read_many(self, entries: Iterable[RemoteBuffer | tuple[Any, ...]], *,
                  timeout: float | None = None) -> list[Any]:
        """Read many buffers in one call: each entry a :class:`RemoteBuffer` (the whole of
        it, into a new array) or a tuple (buffer, out=None, offset=0, nbytes=None) as
        :meth:`read` takes them; the results in entry order. The reads of one owner are
        posted together and waited for together. A failure raises its error naming the
        entry; the other entries' ``out`` are then unspecified."""
        return self._read_many(entries, timeout, None)

    @public
    async def aread_many(self, entries: Iterable[RemoteBuffer | tuple[Any, ...]], *,
                         timeout: float | None = None) -> list[Any]:
        """:meth:`read_many` in asyncio, cancelled as :meth:`aread` is."""
        return await self._one_sided.in_thread(lambda cancel: self._read_many(entries, timeout, cancel))

    def _read_many(self, entries: Iterable[RemoteBuffer | tuple[Any, ...]], timeout: float | None,
                   cancel: threading.Event | None) -> list[Any]:
        timeout = check.optional_seconds(timeout, "timeout")
        self._check_running()
        batch = [_read_entry(e, i) for i, e in enumerate(check.sequence(entries, "entries"))]
        results = self._one_sided.read_many(batch, timeout, cancel)
        if self.tensor_type == "torch":
            results = [as_torch(r) if e[1] is None else r for r, e in zip(results, batch)]
        return results

    @public
    def read_blocks(self, buffer: RemoteBuffer, out: Any, blocks: Any, *, index: Any = None,
                    timeout: float | None = None) -> None:
        """Read blocks of ``buffer`` (any task's :class:`RemoteBuffer`, taken as rows of
        ``out``'s row size from its start) one-sided into rows of ``out`` (a writable,
        C-contiguous host tensor; its first dimension counts the rows) in one call: entry
        ``i`` reads row ``blocks[i]`` of the buffer into row ``index[i]`` of ``out`` (row
        ``i`` without ``index``). The core posts the reads from the two index arrays, rows
        that follow each other on both sides as one request, with no Python object per
        entry and the GIL released while they fly: a paged KV cache's blocks, read from
        the cache its owner registered. ``out`` from :meth:`allocate` with
        ``one_sided=True`` is read into as it is; other memory is registered for the call.
        InvalidArgumentError for a row that ``buffer`` or ``out`` lacks, or an index naming
        a row of ``out`` twice; other errors as :meth:`read`, a failed read naming the first
        entry of its run of rows. On failure ``out``'s rows are unspecified."""
        self._read_blocks(buffer, out, blocks, index, timeout, None)

    @public
    async def aread_blocks(self, buffer: RemoteBuffer, out: Any, blocks: Any, *, index: Any = None,
                           timeout: float | None = None) -> None:
        """:meth:`read_blocks` in asyncio, cancelled as :meth:`aread` is."""
        await self._one_sided.in_thread(lambda cancel: self._read_blocks(buffer, out, blocks, index, timeout, cancel))

    def _read_blocks(self, buffer: RemoteBuffer, out: Any, blocks: Any, index: Any, timeout: float | None,
                     cancel: threading.Event | None) -> None:
        timeout = check.optional_seconds(timeout, "timeout")
        self._check_running()
        self._one_sided.read_blocks(buffer, out, blocks, index, timeout, cancel)

    @public
    def write(self, buffer: RemoteBuffer, tensor: Any, *, offset: int = 0,
              timeout: float | None = None) -> None:
        """Write ``tensor``'s bytes (a C-contiguous host tensor, or one on a GPU, from a
        host copy) into ``buffer`` at byte ``offset``, one-sided; it has landed when this
        returns. Errors as :meth:`read`; FailedPreconditionError for a buffer registered
        read-only."""
        self._write(buffer, tensor, offset, timeout, None)

    @public
    async def awrite(self, buffer: RemoteBuffer, tensor: Any, *, offset: int = 0,
                     timeout: float | None = None) -> None:
        """:meth:`write` in asyncio, without blocking the event loop. Cancelling the
        awaiting task gives the access up once its requests are flushed: the bytes may
        have landed in part."""
        await self._one_sided.in_thread(lambda cancel: self._write(buffer, tensor, offset, timeout, cancel))

    def _write(self, buffer: RemoteBuffer, tensor: Any, offset: int, timeout: float | None,
               cancel: threading.Event | None) -> None:
        timeout = check.optional_seconds(timeout, "timeout")
        self._check_running()
        self._one_sided.write(buffer, tensor, offset, timeout, cancel)

    @public
    def publish(self, tensors: Mapping[str, Any], *, version: int = 1, checksums: bool = False,
                grace: float | None = None) -> Publication:
        """Publish ``tensors`` (a mapping of names to tensors; copied in) as ``version`` for
        the job's tasks to read one-sided, each read one whole version, never a mix of two:
        hand the returned :class:`Publication`'s ``ref`` (small, serialisable) to the
        readers (:meth:`read_publication`); its ``update`` publishes the next version, its
        ``close`` ends it. The owner keeps two copies of the tensors, registered read-only;
        with ``checksums`` a CRC-32 of each tensor too, which readers check. An update
        waits until ``grace`` seconds passed since the one before it, so that reads shorter
        than that never read again (see :class:`Publication`); default: the time to read
        the tensors at 1 GB/s, 1 ms at least."""
        self._check_running()
        grace = check.optional_seconds(grace, "grace")
        if grace is not None and grace > MAX_GRACE_SECONDS:
            raise InvalidArgumentError(f"grace is {grace:g}: expected at most {MAX_GRACE_SECONDS:g} seconds")
        return self._one_sided.publish(tensors, version, check.flag(checksums, "checksums"), grace)

    @public
    def read_publication(self, publication: PublicationRef | Publication, *,
                         out: Mapping[str, Any] | None = None, timeout: float | None = None) -> Published:
        """Read the current version of ``publication`` (any task's, by its ref) one-sided:
        ``(version, tensors)``, every tensor of that one version by name (into ``out``'s
        tensors, by name, where given; new arrays otherwise). A read that overlaps the
        owner's updates reads again. DeadlineExceededError after ``timeout`` seconds;
        DataLossError for a tensor whose checksum disagrees; errors as :meth:`read`
        otherwise (NotFoundError once the owner closed it). On failure ``out``'s
        tensors are unspecified."""
        return self._read_publication(publication, out, timeout, None)

    @public
    async def aread_publication(self, publication: PublicationRef | Publication, *,
                                out: Mapping[str, Any] | None = None, timeout: float | None = None) -> Published:
        """:meth:`read_publication` in asyncio, cancelled as :meth:`aread` is."""
        return await self._one_sided.in_thread(
            lambda cancel: self._read_publication(publication, out, timeout, cancel))

    def _read_publication(self, publication: Any, out: Any, timeout: float | None,
                          cancel: threading.Event | None) -> Published:
        timeout = check.optional_seconds(timeout, "timeout")
        if out is not None and not isinstance(out, Mapping):
            raise InvalidArgumentError(f"out must be a mapping of names to tensors, not {type(out).__name__}")
        self._check_running()
        version, tensors = self._one_sided.read_publication(publication, out, timeout, cancel)
        if self.tensor_type == "torch":
            tensors = {name: as_torch(t) if out is None or name not in out else t for name, t in tensors.items()}
        return Published(version, tensors)


def _read_entry(entry: Any, index: int) -> tuple[Any, Any, int, int | None]:
    """A :meth:`OneSidedCalls.read_many` entry as (buffer, out, offset, nbytes)."""
    if isinstance(entry, RemoteBuffer):
        return entry, None, 0, None
    if not isinstance(entry, tuple) or not 1 <= len(entry) <= 4:
        raise InvalidArgumentError(f"entry {index} must be a RemoteBuffer or a tuple "
                                   f"(buffer, out, offset, nbytes), not {type(entry).__name__}")
    buffer, out, offset, nbytes = entry + (None, None, 0, None)[len(entry):]
    return buffer, out, offset, nbytes
