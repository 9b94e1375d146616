"""One-sided access: a task registers a tensor and hands its :class:`RemoteBuffer` out;
any task of the job reads or writes it with RDMA READ and WRITE, without the owner's code
taking part, until the owner unregisters it (:meth:`tensorverbs.Server.register`).

:class:`OneSided` is a task's part of it: its own verbs context (the task's verbs
settings, opened on first use, whatever protocol the task runs), the buffers it registered
(:mod:`.registrations`) and the queue pairs it reads and writes others' through
(:mod:`.access`).
"""
from __future__ import annotations

import asyncio
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable, TypeVar

import numpy as np

from ..devices import HOST, Device, device_of
from ..errors import FailedPreconditionError, InvalidArgumentError, NotFoundError, as_error
from ..out import Out
from ..rows import row_buffer, row_index
from ..rpc import tensorverbs_pb2 as pb
from ..tensor import dtype_enum
from .. import _core
from . import publication_reads
from .access import BOUNCE_BYTES, RemoteAccess
from .buffer import RemoteBuffer, host_buffer
from .context import VerbsContext
from .publication import PublicationRef, Published
from .publisher import Publication
from .registrations import Registrations

if TYPE_CHECKING:
    from ..runtime import TaskRuntime
    from ..verbs.config import RdmaConfig

__all__ = ["OneSided", "Publication", "PublicationRef", "Published", "RemoteBuffer"]

#: threads that carry out the accesses awaited in asyncio (each waits for its completions)
ASYNC_THREADS = 8
#: the host landings of device outs (GPU tensors) one read_many holds at once: more are
#: read, and copied to their devices, in turns
STAGING_BYTES = 256 << 20
T = TypeVar("T")


class OneSided:
    """The task of ``rt``'s registered buffers and its access to other tasks'."""

    def __init__(self, rt: "TaskRuntime", config: "RdmaConfig", bind_host: str) -> None:
        self._rt = rt
        self._verbs = VerbsContext(config, rt.host, bind_host)
        self._registrations = Registrations(rt, self._verbs)
        self._access = RemoteAccess(rt, self._verbs)
        rt.counters.gauge("registered_buffers", self._registrations.count)
        rt.counters.gauge("remote_accesses_in_flight", self._access.in_flight)
        self._lock = threading.Lock()
        #: the publications of this task, by their header's (addr, rkey), until closed
        self._publications: dict[tuple[int, int], Publication] = {}
        self._threads: ThreadPoolExecutor | None = None  # the accesses awaited in asyncio
        self._cancels: set[threading.Event] = set()
        self._closed = False

    def register(self, tensor: Any, writable: bool) -> RemoteBuffer:
        return self._registrations.register(tensor, writable)

    def allocate(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """An uninitialised array that :meth:`register` opens without registering it again,
        and that peers of this host reach by shared memory."""
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        return self._verbs.allocate(nbytes).view(dtype).reshape(shape)

    def unregister(self, buffer: RemoteBuffer) -> None:
        self._registrations.unregister(_checked(buffer))

    def publish(self, tensors: Any, version: int, checksums: bool, grace: float | None) -> Publication:
        publication = Publication(self, tensors, version, checksums, grace, self._unpublished)
        with self._lock:
            self._publications[(publication.ref.header.addr, publication.ref.header.rkey)] = publication
        return publication

    def _unpublished(self, publication: Publication) -> None:
        with self._lock:
            self._publications.pop((publication.ref.header.addr, publication.ref.header.rkey), None)

    def hold(self, request: pb.HoldPublicationRequest) -> None:
        """HoldPublication: hold the updates of a publication of this task's (on the event
        loop; never blocks)."""
        if request.incarnation != self._rt.incarnation:
            raise NotFoundError(f"the publication is of an earlier process of {self._rt.task}")
        if not math.isfinite(request.seconds) or request.seconds < 0:
            raise InvalidArgumentError(f"a hold of {request.seconds} seconds")
        self._published(request.header_addr, request.header_rkey).hold(request.seconds)

    def hold_publication(self, ref: PublicationRef, seconds: float, timeout: float | None) -> None:
        """Ask the owner of ``ref`` to hold its updates for ``seconds``."""
        if self._is_mine(ref.header):
            self._published(ref.header.addr, ref.header.rkey).hold(seconds)
        else:
            self._access.hold(ref.header, seconds, timeout)

    def _published(self, addr: int, rkey: int) -> Publication:
        with self._lock:
            publication = self._publications.get((addr, rkey))
        if publication is None or publication.closed:
            raise NotFoundError(f"{self._rt.task} has no such publication (closed, or never published)")
        return publication

    def read_publication(self, ref: Any, out: Any, timeout: float | None,
                         cancel: threading.Event | None = None) -> Published:
        if isinstance(ref, Publication):
            ref = ref.ref
        if not isinstance(ref, PublicationRef):
            raise InvalidArgumentError(f"expected a Publication or its ref, not {type(ref).__name__}")
        return publication_reads.read(self, self._rt.counters, ref, out, timeout, cancel)

    def read_words(self, buffer: RemoteBuffer, first: int, count: int, timeout: float | None,
                   cancel: threading.Event | None = None) -> list[int]:
        """The 8-byte words [first, first + count) of ``buffer``, in one read (of a buffer of
        this task's own: each loaded with fences around it)."""
        if self._is_mine(buffer):
            words = self._registrations.local(buffer).view(np.uint64)
            return [_core.load_fenced(words, first + i) for i in range(count)]
        into = np.empty(count, np.uint64)
        self.read_bytes([(buffer, into.view(np.uint8), 8 * first)], timeout, cancel)
        return [int(word) for word in into]

    def read_bytes(self, reads: list[tuple[RemoteBuffer, np.ndarray, int]], timeout: float | None,
                   cancel: threading.Event | None = None) -> None:
        """Each (buffer, bytes, offset): ``bytes`` (a C-contiguous host array of uint8, the
        caller's own) filled from ``buffer`` at ``offset``; the reads of one owner in one go.
        :meth:`read_many` without the checks and conversions of its ``out``s."""
        remote = []
        for i, (buffer, into, offset) in enumerate(reads):
            buffer.span(offset, into.nbytes)
            if self._is_mine(buffer):
                into[:] = self._registrations.local(buffer)[offset:offset + into.nbytes]
            else:
                remote.append((buffer, into, offset, i if len(reads) > 1 else None))
        if remote:
            self._access.read_many(remote, timeout, cancel)
        self._rt.counters.add("remote_reads", len(reads))
        self._rt.counters.add("remote_bytes_read", sum(into.nbytes for _, into, _ in reads))

    async def accept(self, request: pb.GetRemoteAccessRequest) -> pb.GetRemoteAccessResponse:
        """GetRemoteAccess, answered by the registrations."""
        return await self._registrations.accept(request)

    def read(self, buffer: RemoteBuffer, out: Any, offset: int, nbytes: int | None,
             timeout: float | None, cancel: threading.Event | None = None) -> np.ndarray | Any:
        """``out`` (or a new array: the buffer's dtype and shape for the whole buffer, else
        a flat array of its dtype) filled with the buffer's bytes from ``offset``; ``cancel``,
        once set, gives it up (CancelledError)."""
        return self.read_many([(buffer, out, offset, nbytes)], timeout, cancel)[0]

    def read_many(self, entries: list[tuple[Any, Any, int, int | None]], timeout: float | None,
                  cancel: threading.Event | None = None) -> list[Any]:
        """Each entry's read (buffer, out, offset, nbytes), as :meth:`read`; the reads of
        one owner in one go. An argument of an entry that is wrong is named by its index."""
        reads: list[tuple[RemoteBuffer, np.ndarray, int, int | None]] = []
        stores: list[tuple[int, Device, Any, np.ndarray]] = []
        results, total, staged = [], 0, 0
        deadline = None if timeout is None else time.monotonic() + timeout
        for i, (buffer, out, offset, nbytes) in enumerate(entries):
            try:
                buffer = _checked(buffer)
                into, result, device = self._target(buffer, out, offset, nbytes)
            except InvalidArgumentError as exc:
                raise (InvalidArgumentError(f"entry {i}: {exc.message}") if len(entries) > 1 else exc) from None
            if self._is_mine(buffer):
                into.reshape(-1).view(np.uint8)[:] = self._registrations.local(buffer)[offset:offset + into.nbytes]
            else:
                reads.append((buffer, into, offset, i if len(entries) > 1 else None))
            if device is not HOST:
                stores.append((i, device, out, into))
                staged += into.nbytes
            results.append(result)
            total += into.nbytes
            if staged >= STAGING_BYTES:  # read these, and copy them to their devices, first
                self._read_and_store(reads, stores, deadline, cancel, len(entries) > 1)
                reads, stores, staged = [], [], 0
        self._read_and_store(reads, stores, deadline, cancel, len(entries) > 1)
        self._rt.counters.add("remote_reads", len(entries))
        self._rt.counters.add("remote_bytes_read", total)
        return results

    def read_blocks(self, buffer: RemoteBuffer, out: Any, blocks: Any, index: Any, timeout: float | None,
                    cancel: threading.Event | None = None) -> None:
        """Row ``blocks[i]`` of ``buffer`` (rows of ``out``'s row size) into row
        ``index[i]`` of ``out`` (row ``i`` without ``index``), for every entry."""
        buffer = _checked(buffer)
        if device_of(out) is not HOST:
            raise InvalidArgumentError(f"out is on {device_of(out).name}: blocks are read into host memory "
                                       "(read_many with device outs reaches a device's buffer)")
        landing = row_buffer(HOST.landing(out), "out")
        row_bytes = landing.itemsize * int(np.prod(landing.shape[1:], dtype=np.int64))
        if not row_bytes:
            raise InvalidArgumentError(f"out's rows are empty (shape {landing.shape}): a block is one row")
        if blocks is None:
            raise InvalidArgumentError("blocks must name the rows of the buffer to read")
        src = row_index(blocks, buffer.nbytes // row_bytes, f"{buffer} in rows of {row_bytes} bytes", "blocks")
        if index is None and len(src) > landing.shape[0]:
            raise InvalidArgumentError(f"blocks names {len(src)} rows and out has {landing.shape[0]}: "
                                       "one row of out per block (index= places them)")
        dst = row_index(np.arange(len(src)) if index is None else index, landing.shape[0], "out", distinct=True)
        if len(src) != len(dst):
            raise InvalidArgumentError(f"blocks names {len(src)} rows and index {len(dst)}: one row of out per block")
        if not len(src):
            return
        if self._is_mine(buffer):
            rows = self._registrations.local(buffer)[:src.size and (int(src.max()) + 1) * row_bytes]
            landing.reshape(len(landing), -1).view(np.uint8)[dst] = rows.reshape(-1, row_bytes)[src]
        else:
            self._access.read_rows(buffer, landing, src, dst, timeout, cancel)
        self._rt.counters.add("remote_reads", len(src))
        self._rt.counters.add("remote_bytes_read", len(src) * row_bytes)

    def _read_and_store(self, reads: list[tuple[RemoteBuffer, np.ndarray, int, int | None]],
                        stores: list[tuple[int, Device, Any, np.ndarray]], deadline: float | None,
                        cancel: threading.Event | None, many: bool) -> None:
        """The ``reads``, then each device out of ``stores`` filled from its host landing."""
        if reads:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            self._access.read_many(reads, timeout, cancel)
        for i, device, out, landing in stores:
            try:
                device.store(out, landing)
            except Exception as exc:
                what = f"entry {i}: " if many else ""
                raise as_error(exc, f"{what}the bytes were read; copying them into out on "
                                    f"{device.name}") from exc

    def _target(self, buffer: RemoteBuffer, out: Any, offset: int,
                nbytes: int | None) -> tuple[np.ndarray, Any, Device]:
        """(where a read of ``buffer`` lands, what it returns, the device of that): ``out``,
        or a new array; a host landing for an ``out`` on a device the provider cannot reach
        (a GPU without GPUDirect), copied into ``out`` once read."""
        if out is not None:  # checked as recv checks its out
            target = Out(out)
            enum, whole = dtype_enum(buffer.numpy_dtype), offset == 0 and nbytes is None
            if target.dtype != enum:
                raise target.refusal(f"a read of {buffer}", enum, buffer.shape, "the buffer holds", "")
            if nbytes is not None and nbytes != target.landing.nbytes:
                raise InvalidArgumentError(f"nbytes {nbytes} disagrees with out's {target.landing.nbytes} bytes")
            buffer.span(offset, target.landing.nbytes)
            if whole and not target.fits(enum, buffer.shape):
                raise target.refusal(f"a read of {buffer}", enum, buffer.shape, "the buffer holds",
                                     " (give offset= or nbytes= to read a part of it)")
            return target.landing, out, target.device
        offset, nbytes = buffer.span(offset, nbytes)
        dtype = buffer.numpy_dtype
        if offset % dtype.itemsize or nbytes % dtype.itemsize:
            raise InvalidArgumentError(
                f"offset {offset} and nbytes {nbytes} must be multiples of {dtype}'s "
                f"{dtype.itemsize} bytes, or give out=")
        shape = buffer.shape if nbytes == buffer.nbytes else (nbytes // dtype.itemsize,)
        into = (np.empty(shape, dtype) if nbytes <= BOUNCE_BYTES or self._is_mine(buffer)
                else self._verbs.allocate(nbytes).view(dtype).reshape(shape))
        return into, into, HOST

    def write(self, buffer: RemoteBuffer, tensor: Any, offset: int, timeout: float | None,
              cancel: threading.Event | None = None) -> None:
        """Write ``tensor``'s bytes into the buffer at ``offset`` (from a host copy of a
        tensor on a device the provider cannot reach)."""
        buffer = _checked(buffer)
        device = device_of(tensor)
        data = host_buffer(tensor if device is HOST else device.to_host(tensor), "the tensor to write",
                           writable=False)
        buffer.span(offset, data.nbytes)
        if self._is_mine(buffer):
            local = self._registrations.local(buffer, write=True)
            local[offset:offset + data.nbytes] = data.reshape(-1).view(np.uint8)
        else:
            self._access.write(buffer, data, offset, timeout, cancel)
        self._rt.counters.add("remote_writes")
        self._rt.counters.add("remote_bytes_written", data.nbytes)

    def _is_mine(self, buffer: RemoteBuffer) -> bool:
        return buffer.task == str(self._rt.task) and buffer.incarnation == self._rt.incarnation

    async def in_thread(self, access: Callable[[threading.Event], T]) -> T:
        """``access(cancel)`` run in a thread of this task's and awaited without blocking
        the event loop. Cancelling the awaiting task sets ``cancel`` and waits for the
        access to give up (its requests flushed: nothing lands afterwards) before the
        task's CancelledError goes on."""
        cancel = threading.Event()
        with self._lock:
            if self._closed:
                raise FailedPreconditionError("the server was stopped")
            if self._threads is None:
                self._threads = ThreadPoolExecutor(ASYNC_THREADS, thread_name_prefix="tv-one-sided-async")
            self._cancels.add(cancel)
            done = asyncio.wrap_future(self._threads.submit(access, cancel))
        try:
            return await asyncio.shield(done)
        except asyncio.CancelledError:
            cancel.set()
            while not done.done():  # the access gives up within a wait slice
                try:
                    await asyncio.wait([done])
                except asyncio.CancelledError:
                    pass
            if not done.cancelled():
                done.exception()  # retrieved: the task's cancellation is what goes on
            raise
        finally:
            with self._lock:
                self._cancels.discard(cancel)

    def close(self) -> None:
        with self._lock:
            publications = list(self._publications.values())
        for publication in publications:  # (an update waiting for readers fails)
            publication.close()
        with self._lock:
            self._closed = True
            threads, self._threads = self._threads, None
            for cancel in self._cancels:
                cancel.set()
        if threads is not None:  # the accesses under way give up within a wait slice
            threads.shutdown(wait=False)
        self._access.close()
        self._registrations.close()


def _checked(buffer: Any) -> RemoteBuffer:
    if not isinstance(buffer, RemoteBuffer):
        raise InvalidArgumentError(f"expected a RemoteBuffer, not {type(buffer).__name__}")
    return buffer
