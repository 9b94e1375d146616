"""The accessing side of one-sided access: RDMA READ and WRITE of other tasks' registered
buffers (RemoteBuffer), through a queue pair per owner set up over the control plane on
first use.

An access posts its work requests and waits for their completions in the calling thread
(the GIL released, no other thread involved); accesses to one owner take turns on its
queue pair. Up to BOUNCE_BYTES of an access of entries (read_many, write) move through a
registered buffer of the queue pair's (copied to or from the caller's memory); larger ones
use the caller's memory, registered for the access unless it was allocated for one-sided
access (a read's own result is). A row access (read_blocks) reads straight into the
caller's rows: memory allocated for one-sided access as it is, other memory registered for
the access from its first row read to its last. A failed access (a revoked or forged descriptor, an owner gone) fails its
queue pair only: the next access sets up another, and the task's channels are untouched.
An access that times out or is interrupted moves its queue pair to the error state and
waits for its requests to be flushed before it returns, so that nothing lands in the
caller's memory afterwards.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Sequence, cast

import grpc
import numpy as np

from .. import _core
from ..cluster import TaskName, parse_task
from ..errors import (
    CancelledError, DeadlineExceededError, FailedPreconditionError, NotFoundError, TensorverbsError, UnavailableError,
)
from ..rpc import tensorverbs_pb2 as pb
from ..rpc.errors import from_rpc_error
from .buffer import RemoteBuffer

if TYPE_CHECKING:
    from ..runtime import TaskRuntime
    from .context import VerbsContext

#: accesses up to this size go through the queue pair's own registered buffer
BOUNCE_BYTES = 256 << 10
#: the most bytes one work request moves (SGE lengths are 32-bit)
CHUNK_BYTES = 1 << 30
#: work requests an access of entries (read_many, write) has posted at once
SEND_WR = 64
#: work requests of a row access (read_blocks) posted together, only the last signaled;
#: two such windows are outstanding at once, so a link's send queue holds twice this, and
#: its completion queue that many more (a failure flushes every request, signaled or not)
ROW_WINDOW = 256
LINK_SEND_WR = 2 * ROW_WINDOW
#: the wr_id of the request a failed link is given after its error: it completes last
_SENTINEL = (1 << 62) - 1
#: how long a wait for completions sleeps at most before it looks at the clock again
#: (and lets Python run a signal handler)
WAIT_SLICE_MS = 200
#: how long an access that failed waits for its requests to be flushed (seconds); their
#: memory stays registered if they are not
FLUSH_SECONDS = 10.0
#: how long setting up a queue pair to an owner may take (seconds)
CONNECT_SECONDS = 60.0
WC_REM_ACCESS_ERR = 10


class _Item:
    """One entry of an access: ``flat`` (the caller's bytes) to or from ``buffer`` at
    ``offset``; where its local bytes are registered once the access places them."""

    def __init__(self, entry: int | None, buffer: RemoteBuffer, local: np.ndarray, offset: int) -> None:
        self.buffer, self.offset = buffer, offset
        self.flat = local.reshape(-1).view(np.uint8)
        self.nbytes = self.flat.nbytes
        self.what = str(buffer) if entry is None else f"entry {entry} ({buffer})"
        self.local = self.lkey = 0
        self.staged: np.ndarray | None = None


def _address(array: np.ndarray) -> int:
    return int(array.__array_interface__["data"][0])


def _aligned(nbytes: int) -> int:
    return -(-nbytes // 64) * 64


class _Link:
    """One queue pair to one owner, used by one access at a time."""

    def __init__(self, qp: _core.QueuePair, cq: _core.CompletionQueue, incarnation: int,
                 bounce: _core.MemoryRegion) -> None:
        self.qp, self.cq, self.incarnation, self.bounce = qp, cq, incarnation, bounce
        self.lock = threading.Lock()
        self.broken = False


class _Wait:
    """How long an access may still wait: until ``deadline`` (monotonic seconds, None for
    ever) unless ``cancel`` is set first."""

    def __init__(self, timeout: float | None, cancel: threading.Event | None) -> None:
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.cancel = cancel

    def next_slice(self, what: str) -> tuple[int, TensorverbsError | None]:
        """(ms to wait next, at most WAIT_SLICE_MS), or why the access ends now."""
        if self.cancel is not None and self.cancel.is_set():
            return 0, CancelledError(f"an access of {what} was cancelled")
        if self.deadline is None:
            return WAIT_SLICE_MS, None
        left = self.deadline - time.monotonic()
        if left <= 0:
            return 0, DeadlineExceededError(f"an access of {what} timed out")
        return max(1, min(WAIT_SLICE_MS, int(left * 1000))), None


class RemoteAccess:
    """Reads and writes other tasks' buffers for the task of ``rt``, in ``verbs``."""

    def __init__(self, rt: "TaskRuntime", verbs: "VerbsContext") -> None:
        self._rt, self._verbs = rt, verbs
        self._lock = threading.Lock()
        self._links: dict[str, _Link] = {}
        self._connecting: dict[str, threading.Lock] = {}
        self._kept: list[Any] = []  # registrations of requests that were never flushed
        self._in_flight = 0  # accesses begun and not ended (under _lock)

    def in_flight(self) -> int:
        """How many accesses (a read_many of one owner counts once) are under way."""
        return self._in_flight

    def read_many(self, entries: Sequence[tuple[RemoteBuffer, np.ndarray, int, int | None]],
                  timeout: float | None, cancel: threading.Event | None = None) -> None:
        """Each entry's read (buffer, into, offset, the index an error names it by, or
        None), the entries of one owner posted on its queue pair together and waited for
        together; an error leaves the others' ``into`` unspecified. ``cancel``, once set,
        gives the access up (CancelledError), as a timeout does."""
        until = _Wait(timeout, cancel)
        groups: dict[tuple[str, int], list[_Item]] = {}
        for buffer, into, offset, index in entries:
            groups.setdefault((buffer.task, buffer.incarnation), []).append(_Item(index, buffer, into, offset))
        for batch in groups.values():
            self._access(batch, _core.WR_RDMA_READ, until)

    def read_rows(self, buffer: RemoteBuffer, out: np.ndarray, src: np.ndarray, dst: np.ndarray,
                  timeout: float | None, cancel: threading.Event | None = None) -> None:
        """Row ``src[i]`` of ``buffer`` (rows of ``out``'s row size, from its start) read
        into row ``dst[i]`` of ``out`` (C-contiguous host memory, rows checked by the
        caller), for every ``i``: posted by the core in windows of ROW_WINDOW requests
        (runs of rows that follow each other on both sides as one), no Python object per
        entry; two windows in flight, each waited for by its one signaled completion. An
        error leaves ``out``'s rows unspecified."""
        self._on_link(buffer, _Wait(timeout, cancel),
                      lambda link, until: self._run_rows(link, buffer, out, src, dst, until))

    def _run_rows(self, link: _Link, buffer: RemoteBuffer, out: np.ndarray, src: np.ndarray,
                  dst: np.ndarray, until: _Wait) -> None:
        flat = out.reshape(-1).view(np.uint8)
        row_bytes = flat.nbytes // len(out)
        region = self._verbs.region_of(_address(flat), flat.nbytes)
        regions: list[Any] = [region, flat]
        if region is None:  # not allocated for one-sided access: its rows read registered for this one
            span = flat[int(dst.min()) * row_bytes:(int(dst.max()) + 1) * row_bytes]
            region = self._verbs.pd.register_memory(span, _core.LOCAL_WRITE)
            regions.append(region)
        post = functools.partial(link.qp.post_rows, _core.WR_RDMA_READ, _address(flat), region.lkey, len(out),
                                 buffer.addr, buffer.rkey, buffer.nbytes // row_bytes, row_bytes, src, dst)

        def windows() -> TensorverbsError | None:
            posted = ended = first = 0
            while first < len(src) or ended < posted:
                if first < len(src) and posted - ended < 2:
                    first = post(first, ROW_WINDOW)
                    posted += 1
                    continue
                wait_ms, failure = until.next_slice(str(buffer))
                if failure is not None:
                    return failure
                for wc in link.cq.wait(posted - ended, wait_ms):
                    ended += bool(wc.wr_id & _core.ROW_WINDOW_END)
                    if not wc.ok:  # (the first: later ones are its flushes)
                        entry = wc.wr_id & ~_core.ROW_WINDOW_END
                        return self._failure(f"entry {entry} ({buffer})", wc, link.qp.error_detail, buffer)
            return None

        self._waited(link, regions, windows)

    def write(self, buffer: RemoteBuffer, data: np.ndarray, offset: int, timeout: float | None,
              cancel: threading.Event | None = None) -> None:
        """Write ``data`` (a C-contiguous host array) into ``buffer`` at ``offset``."""
        if not buffer.writable:
            raise FailedPreconditionError(f"{buffer} was registered read-only")
        self._access([_Item(None, buffer, data, offset)], _core.WR_RDMA_WRITE, _Wait(timeout, cancel))

    def _access(self, items: list["_Item"], opcode: int, until: _Wait) -> None:
        """``items`` (of one owner) moved on its queue pair."""
        items = [item for item in items if item.nbytes]
        if items:
            self._on_link(items[0].buffer, until, lambda link, until: self._run(link, items, opcode, until))

    def _on_link(self, buffer: RemoteBuffer, until: _Wait, run: Callable[[_Link, _Wait], None]) -> None:
        """``run(link, until)`` on the working queue pair to ``buffer``'s owner, its lock
        held (set up again if another access failed it meanwhile); counted in flight."""
        with self._lock:
            self._in_flight += 1
        try:
            link = self._link(buffer, until.deadline)
            while True:
                with link.lock:
                    if not link.broken:
                        run(link, until)
                        return
                link = self._link(buffer, until.deadline)
        finally:
            with self._lock:
                self._in_flight -= 1

    def _run(self, link: _Link, items: list["_Item"], opcode: int, until: _Wait) -> None:
        """The access, on ``link`` (its lock held): small items through a staging area
        (the link's own buffer, or pooled memory for a batch), large ones straight from or
        into the caller's memory."""
        small = [item for item in items if item.nbytes <= BOUNCE_BYTES]
        staged_bytes = sum(_aligned(item.nbytes) for item in small)
        stage = (np.frombuffer(cast(Any, link.bounce.buffer), np.uint8) if staged_bytes <= BOUNCE_BYTES
                 else self._verbs.allocate(staged_bytes))
        # what the access's requests reach (registrations and memory), kept alive if they
        # are never flushed
        regions: list[Any] = [self._verbs.region_of(_address(stage), stage.nbytes) or link.bounce, stage]
        at = 0
        for item in small:
            item.local, item.lkey = _address(stage) + at, regions[0].lkey
            item.staged = stage[at:at + item.nbytes]
            if opcode == _core.WR_RDMA_WRITE:
                item.staged[:] = item.flat
            at += _aligned(item.nbytes)
        for item in items:
            if item.staged is None:
                region = self._verbs.region_of(_address(item.flat), item.nbytes)
                if region is None:  # not allocated for one-sided access: registered for this one
                    region = self._verbs.pd.register_memory(
                        item.flat if item.flat.flags.writeable else item.flat.copy(), _core.LOCAL_WRITE)
                item.local, item.lkey = region.addr + (_address(item.flat) - region.addr), region.lkey
                # the memory too: allocated memory its caller drops would go back to the pool
                regions += [region, item.flat]
        self._post(link, items, opcode, regions, until)
        if opcode == _core.WR_RDMA_READ:
            for item in small:
                item.flat[:] = cast(np.ndarray, item.staged)

    def _post(self, link: _Link, items: list["_Item"], opcode: int, regions: list[Any],
              until: _Wait) -> None:
        wrs: list[_core.SendWR] = []
        for i, item in enumerate(items):
            for start in range(0, item.nbytes, CHUNK_BYTES):
                wr = _core.SendWR()
                wr.wr_id, wr.opcode = i, opcode
                wr.addr, wr.length, wr.lkey = item.local + start, min(CHUNK_BYTES, item.nbytes - start), item.lkey
                wr.remote_addr, wr.rkey = item.buffer.addr + item.offset + start, item.buffer.rkey
                wrs.append(wr)
        for first in range(0, len(wrs), SEND_WR):
            batch = wrs[first:first + SEND_WR]
            link.qp.post_send(batch)
            self._complete(link, items, regions, len(batch), until)

    def _complete(self, link: _Link, items: list["_Item"], regions: list[Any], count: int,
                  until: _Wait) -> None:
        """Wait for ``count`` completions; a failure, a timeout, a cancel or an interrupt
        breaks the link (its requests flushed first) and raises."""
        def completions() -> TensorverbsError | None:
            left = count
            while left:
                wait_ms, failure = until.next_slice(items[0].what)
                if failure is not None:
                    return failure
                for wc in link.cq.wait(left, wait_ms):
                    left -= 1
                    if not wc.ok:  # (the first: later ones are its flushes)
                        item = items[wc.wr_id]
                        return self._failure(item.what, wc, link.qp.error_detail, item.buffer)
            return None

        self._waited(link, regions, completions)

    def _waited(self, link: _Link, regions: list[Any], wait: Callable[[], TensorverbsError | None]) -> None:
        """``wait()`` for an access's completions (its failure, or None); a failure, a
        timeout, a cancel or an interrupt breaks ``link`` (its requests flushed first) and
        raises."""
        try:
            failure = wait()
        except BaseException:  # an interrupt: nothing may land after the caller goes on
            self._break(link, regions, "the access was interrupted")
            raise
        if failure is not None:
            self._break(link, regions, str(failure))
            raise failure

    @staticmethod
    def _failure(what: str, wc: Any, detail: str, buffer: RemoteBuffer) -> TensorverbsError:
        if wc.status == WC_REM_ACCESS_ERR:
            return NotFoundError(f"{what} cannot be reached: it was unregistered, or the descriptor "
                                 f"is not one {buffer.task} made ({wc.status_name})")
        return UnavailableError(f"an access of {what} failed: {wc.status_name}"
                                + (f" ({detail})" if detail else ""))

    def _break(self, link: _Link, regions: list[Any], why: str) -> None:
        """Fail ``link`` and wait until every request it holds has completed: a request
        posted after the error (a sentinel) completes after all of them. If it does not,
        ``regions`` stay registered (their memory stays valid)."""
        link.broken = True
        link.qp.to_error(why)
        sentinel = _core.SendWR()
        sentinel.wr_id, sentinel.opcode = _SENTINEL, _core.WR_RDMA_READ
        try:
            link.qp.post_send([sentinel])
        except Exception:  # (the queue pair refuses it: nothing tells when its requests end)
            self._kept.extend(regions)
            return
        deadline = time.monotonic() + FLUSH_SECONDS
        while time.monotonic() < deadline:
            if any(wc.wr_id == _SENTINEL for wc in link.cq.wait(LINK_SEND_WR, WAIT_SLICE_MS)):
                return
        self._kept.extend(regions)

    def _link(self, buffer: RemoteBuffer, deadline: float | None) -> _Link:
        """The working queue pair to ``buffer``'s owner, set up if there is none."""
        owner = buffer.task
        with self._lock:
            link = self._links.get(owner)
            if link is not None and not link.broken and link.incarnation == buffer.incarnation:
                return link
            connecting = self._connecting.setdefault(owner, threading.Lock())
        with connecting:  # one set-up per owner at a time
            with self._lock:
                link = self._links.get(owner)
            if link is None or link.broken or link.incarnation != buffer.incarnation:
                link = self._connect(buffer, deadline)
                with self._lock:
                    self._links[owner] = link
        return link

    def _connect(self, buffer: RemoteBuffer, deadline: float | None) -> _Link:
        task = self._owner(buffer)
        verbs = self._verbs.open()
        if buffer.provider != verbs.provider:
            raise FailedPreconditionError(
                f"{buffer} is reached with the {buffer.provider!r} provider; {self._rt.task} "
                f"uses {verbs.provider!r}")
        qp, cq = verbs.queue_pair(LINK_SEND_WR, verbs.completion_queue(2 * LINK_SEND_WR))
        request = pb.GetRemoteAccessRequest(host_name=str(self._rt.task), incarnation=self._rt.incarnation,
                                            provider=verbs.provider, endpoint=qp.endpoint)
        seconds = CONNECT_SECONDS if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            reply = self._rt.loop.submit(asyncio.wait_for(self._ask(task, buffer, request), seconds)).result()
        except (asyncio.TimeoutError, concurrent.futures.TimeoutError):
            raise DeadlineExceededError(f"{task} did not give access to {buffer} within {seconds:g} s") from None
        qp.connect(reply.endpoint)
        return _Link(qp, cq, reply.incarnation, verbs.pd.allocate_memory(BOUNCE_BYTES, _core.LOCAL_WRITE))

    def _owner(self, buffer: RemoteBuffer) -> TaskName:
        try:
            task = parse_task(buffer.task)
        except TensorverbsError:
            raise NotFoundError(f"{buffer.task!r} is not a task name") from None
        if task not in self._rt.cluster:
            raise NotFoundError(f"{buffer} belongs to a task that is not in this cluster")
        return task

    async def _ask(self, task: TaskName, buffer: RemoteBuffer,
                   request: pb.GetRemoteAccessRequest) -> pb.GetRemoteAccessResponse:
        peers = self._rt.peers
        status = await peers.handshake(task)
        if status.incarnation != buffer.incarnation:  # what this task knows of it may be older
            peers.lost(task)
            status = await peers.handshake(task)
        if status.incarnation != buffer.incarnation:
            raise UnavailableError(f"{buffer} is stale: {task} restarted since it registered the buffer")
        stub = peers.peer(task)
        try:
            reply = await stub.get_remote_access(request)
        except grpc.aio.AioRpcError as exc:
            peers.lost(task)
            raise from_rpc_error(exc, str(stub)) from None
        if reply.incarnation != buffer.incarnation:
            raise UnavailableError(f"{buffer} is stale: {task} restarted since it registered the buffer")
        return reply

    def hold(self, buffer: RemoteBuffer, seconds: float, timeout: float | None) -> None:
        """Ask the owner of ``buffer``, a publication's header, to hold its updates for
        ``seconds`` (HoldPublication)."""
        task = self._owner(buffer)
        request = pb.HoldPublicationRequest(host_name=str(self._rt.task), incarnation=buffer.incarnation,
                                            header_addr=buffer.addr, header_rkey=buffer.rkey, seconds=seconds)

        async def ask() -> None:
            stub = self._rt.peers.peer(task)
            try:
                await stub.hold_publication(request)
            except grpc.aio.AioRpcError as exc:
                raise from_rpc_error(exc, str(stub)) from None

        wait = CONNECT_SECONDS if timeout is None else max(0.0, timeout)
        try:
            self._rt.loop.submit(asyncio.wait_for(ask(), wait)).result()
        except (asyncio.TimeoutError, concurrent.futures.TimeoutError):
            raise DeadlineExceededError(f"{task} did not answer a hold of its publication within {wait:g} s") from None

    def close(self) -> None:
        """Close every queue pair (the task stops)."""
        with self._lock:
            self._links.clear()
