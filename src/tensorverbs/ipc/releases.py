"""Releases: a receiver's word to the senders of tensors passed by handle that it copied
them out (ReleaseSharedTensor, upon which a sender frees its exports), coalesced per
sender: one call in flight to each, made :data:`RELEASE_DELAY` after the first release it
carries or after the call before it ended, with every export released until it goes. A
receiver taking many tensors from one sender makes a few calls, not one each (a call
costs both sides far more CPU than opening and copying a small tensor)."""
from __future__ import annotations

import asyncio
import itertools
import logging
import threading
from typing import TYPE_CHECKING

import grpc

from ..errors import CancelledError, UnavailableError, as_error
from ..rpc import tensorverbs_pb2 as pb
from ..rpc.errors import from_rpc_error
from ..rpc.options import RELEASE_BATCH

if TYPE_CHECKING:
    from ..cluster import TaskName
    from ..rpc.loop import EventLoopThread
    from ..rpc.peers import Peers

log = logging.getLogger(__name__)

#: how long a ReleaseSharedTensor may take (the sender frees at its step's end otherwise)
RELEASE_TIMEOUT = 30.0
#: how long a stopping task may spend telling its senders what it released
CLOSE_SECONDS = 1.0
#: how long a receiver collects releases for a sender before it calls: a call costs each
#: side over 100 µs of CPU, and made at once it competes with the receiver's next recv
#: (4 KiB by handle, stand-in: a 340 µs round trip with a call per tensor, 110 µs so)
RELEASE_DELAY = 0.002


class Releases:
    """The exports of each sender that ``task`` released and has not told it of yet."""

    def __init__(self, task: "TaskName", loop: "EventLoopThread", peers: "Peers") -> None:
        self.task, self.loop, self.peers = task, loop, peers
        # a sender's entry exists while a task is due to tell it: (incarnation, export id)s
        self._pending: dict["TaskName", list[tuple[int, int]]] = {}
        self._tasks: set[asyncio.Task[None]] = set()  # (on the loop's thread only)
        self._lock = threading.Lock()
        self._stopping = False

    def add(self, src: "TaskName", incarnation: int, export_id: int) -> None:
        """Tell ``src`` soon (on the event loop, not waiting) that it may free its export
        ``export_id`` (of its ``incarnation``); nothing once this task stops (the sender
        frees it when its step ends)."""
        with self._lock:
            if self._stopping:
                return
            pending = self._pending.get(src)
            if pending is not None:  # the call under way, or the next, takes it along
                pending.append((incarnation, export_id))
                return
            self._pending[src] = [(incarnation, export_id)]
        try:
            self.loop.call_soon(self._start, src)
        except RuntimeError:  # the loop is closed: the sender frees it when its step ends
            with self._lock:
                self._pending.pop(src, None)

    def _start(self, src: "TaskName") -> None:
        task = asyncio.ensure_future(self._tell(src))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _tell(self, src: "TaskName") -> None:
        """Send ``src`` its pending releases, one call at a time (each after the delay),
        until none is left."""
        try:
            while True:
                await asyncio.sleep(RELEASE_DELAY)
                with self._lock:
                    batch = self._pending[src]
                    if not batch:
                        del self._pending[src]
                        return
                    self._pending[src] = []
                batch.sort()
                for incarnation, entries in itertools.groupby(batch, key=lambda entry: entry[0]):
                    ids = [export_id for _, export_id in entries]
                    for start in range(0, len(ids), RELEASE_BATCH):
                        await self._call(src, pb.ReleaseSharedTensorRequest(
                            incarnation=incarnation, export_ids=ids[start:start + RELEASE_BATCH]))
        except asyncio.CancelledError:  # the server stops: each sender frees them as steps end
            with self._lock:
                self._pending.pop(src, None)
            raise

    async def _call(self, src: "TaskName", request: pb.ReleaseSharedTensorRequest) -> None:
        try:
            await self.peers.peer(src).release_shared_tensor(request, timeout=RELEASE_TIMEOUT)
        except Exception as exc:  # the sender frees them when their steps end
            error = (from_rpc_error(exc, str(src)) if isinstance(exc, grpc.RpcError)
                     else as_error(exc, "ReleaseSharedTensor"))
            # a sender stopping (or gone) frees everything itself
            stopping = isinstance(error, (CancelledError, UnavailableError))
            level = logging.DEBUG if stopping else logging.WARNING
            log.log(level, "%s: releasing %d shared tensors of %s: %s", self.task,
                    len(request.export_ids), src, error.message)

    async def close(self) -> None:
        """On the loop, as the server stops and before its channels close: send what is
        pending, for up to :data:`CLOSE_SECONDS` (then give it up), and nothing later."""
        with self._lock:
            self._stopping = True
        tasks = list(self._tasks)
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=CLOSE_SECONDS)
            for task in late:  # a sender that does not answer frees them as its steps end
                task.cancel()
