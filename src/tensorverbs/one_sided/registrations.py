"""The owner's side of one-sided access: this task's registered buffers, and the queue
pairs its peers reach them through.

A buffer is registered with the task's protection domain and opened to peers through a
memory window of its own (remote read, and remote write unless registered read-only); the
window's rkey is what its RemoteBuffer carries. Unregistering revokes the window at once:
an access that starts later fails at the transport; one under way finishes first (the
registration is held until the window is quiesced), so freed memory is never touched.
A peer that wants access asks over the control plane (GetRemoteAccess, which only the
job's tasks reach, each as itself); this task connects a queue pair of its own to the
peer's (one task's set-ups one at a time, none waiting for another's), replacing the
peer's earlier one (whose own failure, after a bad access, is the peer's to repair). None of
this runs this task's Python per access. The soft provider progresses a context only while
a thread waits on one of its completion queues: a thread of this task's (``tv-one-sided``)
waits there, asleep in the provider while no access comes, so that peers' accesses are
served; a device progresses by itself.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import _core
from ..cluster import parse_task
from ..errors import FailedPreconditionError, NotFoundError, ResourceExhaustedError
from ..native_waits import end_at_exit
from ..rpc import tensorverbs_pb2 as pb
from ..rpc.peer_threads import PeerThreads
from .buffer import RemoteBuffer, host_buffer

if TYPE_CHECKING:
    from ..runtime import TaskRuntime
    from .context import VerbsContext

log = logging.getLogger(__name__)

#: how long unregister waits for an access under way to finish (seconds); one that does
#: not (its peer died mid-copy) keeps the buffer's registration, so its memory stays valid
QUIESCE_SECONDS = 5.0
#: the most callers outside the task's cluster it serves one-sided access to (a queue pair each)
MAX_OUTSIDERS = 256
#: how long the soft provider's driver sleeps at most before it looks whether the task stopped
DRIVE_WAIT_MS = 1000


@dataclass
class _Registered:
    array: np.ndarray
    region: Any   # _core.MemoryRegion
    window: Any   # _core.MemoryWindow
    writable: bool


class Registrations:
    """The buffers of the task of ``rt`` open to one-sided access, in ``verbs``."""

    def __init__(self, rt: "TaskRuntime", verbs: "VerbsContext") -> None:
        self._rt, self._verbs = rt, verbs
        self._lock = threading.Lock()
        self._buffers: dict[tuple[int, int], _Registered] = {}  # (addr, rkey)
        self._served: dict[str, _core.QueuePair] = {}  # peer -> the queue pair it reaches
        self._outsiders: set[str] = set()  # callers outside the cluster served or being set up
        self._setups = PeerThreads("tv-access-setup")
        self._stuck: list[_Registered] = []  # revoked with an access still under way
        self._driver: threading.Thread | None = None
        #: the completion queue of the queue pairs peers reach buffers through, which the
        #: soft provider's driver waits on
        self._cq: Any = None
        self._closed = False

    def register(self, tensor: Any, writable: bool) -> RemoteBuffer:
        """Open ``tensor``'s memory to one-sided access (read, and write if ``writable``)."""
        array = host_buffer(tensor, "the tensor to register", writable=True)
        if array.nbytes == 0:
            raise FailedPreconditionError("an empty tensor has no bytes to register")
        verbs = self._verbs.open()
        addr = array.__array_interface__["data"][0]
        region = verbs.region_of(addr, array.nbytes)  # allocated here: registered already
        if region is None:
            region = verbs.pd.register_memory(array.reshape(-1).view(np.uint8), _core.LOCAL_WRITE)
        access = _core.REMOTE_READ | (_core.REMOTE_WRITE if writable else 0)
        window = verbs.pd.bind_window(region, addr, array.nbytes, access)
        with self._lock:
            self._buffers[(window.addr, window.rkey)] = _Registered(array, region, window, writable)
        return RemoteBuffer(str(self._rt.task), self._rt.incarnation, verbs.provider, window.addr,
                            window.rkey, array.nbytes, array.dtype.name, tuple(array.shape), writable)

    def count(self) -> int:
        """How many buffers are registered."""
        with self._lock:
            return len(self._buffers)

    def unregister(self, buffer: RemoteBuffer) -> None:
        """Revoke ``buffer``: every later access fails; returns once none is under way."""
        with self._lock:
            if buffer.task != str(self._rt.task) or buffer.incarnation != self._rt.incarnation:
                raise NotFoundError(f"{buffer} was not registered by this process of {self._rt.task}")
            registered = self._buffers.pop((buffer.addr, buffer.rkey), None)
        if registered is None:
            raise NotFoundError(f"{buffer} is not registered (unregistered already, or never)")
        self._revoke(registered)

    def local(self, buffer: RemoteBuffer, write: bool = False) -> np.ndarray:
        """The bytes of ``buffer``, registered by this process (an access of this task's own
        buffer is a copy); NotFoundError if it is not registered, FailedPreconditionError
        to ``write`` one registered read-only (whatever the descriptor says, as the
        transport's rights decide for a peer's)."""
        with self._lock:
            registered = self._buffers.get((buffer.addr, buffer.rkey))
        if registered is None or registered.array.nbytes != buffer.nbytes:
            raise NotFoundError(f"{buffer} is not registered (unregistered, or never)")
        if write and not registered.writable:
            raise FailedPreconditionError(f"{buffer} was registered read-only")
        return registered.array.reshape(-1).view(np.uint8)

    def _revoke(self, registered: _Registered) -> None:
        if registered.window.revoke():
            return
        deadline = time.monotonic() + QUIESCE_SECONDS
        while not registered.window.quiesced():
            if time.monotonic() > deadline:
                log.warning("%s: an access of a revoked buffer did not finish in %g s; its memory "
                            "stays registered", self._rt.task, QUIESCE_SECONDS)
                with self._lock:
                    self._stuck.append(registered)
                return
            time.sleep(0.001)  # an access under way takes micro- to milliseconds

    async def accept(self, request: pb.GetRemoteAccessRequest) -> pb.GetRemoteAccessResponse:
        """GetRemoteAccess (on the event loop): connect a queue pair to the caller's (one
        per caller: the tasks of the cluster, and MAX_OUTSIDERS others at most, such as a
        Ray driver that this task never learned)."""
        caller = parse_task(request.host_name)
        name = str(caller)
        outsider = caller not in self._rt.cluster
        if outsider:
            with self._lock:  # (counted as its set-up starts: set-ups that hang count too)
                if name not in self._outsiders and len(self._outsiders) >= MAX_OUTSIDERS:
                    raise ResourceExhaustedError(
                        f"{self._rt.task} serves one-sided access to {MAX_OUTSIDERS} tasks outside its "
                        f"cluster already: {caller} is refused")
                self._outsiders.add(name)
        try:
            return await self._setups.run(name, self._connect, request, name)
        finally:
            if outsider:
                with self._lock:
                    if name not in self._served:  # its set-up failed: its place is free
                        self._outsiders.discard(name)

    def _connect(self, request: pb.GetRemoteAccessRequest, caller: str) -> pb.GetRemoteAccessResponse:
        verbs = self._verbs.open()
        if request.provider != verbs.provider:
            raise FailedPreconditionError(
                f"{request.host_name} reaches buffers with the {request.provider!r} provider, "
                f"{self._rt.task} registers them with {verbs.provider!r}")
        with self._lock:  # served queue pairs complete nothing (peers' reads and writes) but errors
            self._cq = self._cq or verbs.completion_queue()
        qp, _ = verbs.queue_pair(1, self._cq)
        qp.connect(request.endpoint)
        with self._lock:
            self._served[caller] = qp  # the caller's earlier one is closed
            if parse_task(caller) not in self._rt.cluster:  # (also one whose wait was given up)
                self._outsiders.add(caller)
            if verbs.provider == "soft" and self._driver is None and not self._closed:
                self._driver = threading.Thread(target=self._drive, name="tv-one-sided", daemon=True)
                self._driver.start()
                end_at_exit(self._driver, self._stop_driving)
        return pb.GetRemoteAccessResponse(incarnation=self._rt.incarnation, provider=verbs.provider,
                                          endpoint=qp.endpoint)

    def _drive(self) -> None:
        """Progress the soft provider's context until the task stops (the GIL released)."""
        while not self._closed:
            self._cq.wait(1, DRIVE_WAIT_MS)

    def _stop_driving(self) -> None:
        """End the driver (the process exits)."""
        self._closed = True
        self._cq.wake()

    def close(self) -> None:
        """Revoke every buffer and close every queue pair (the task stops)."""
        with self._lock:
            buffers, self._buffers = list(self._buffers.values()), {}
            self._served.clear()
            self._closed = True
            driver = self._driver
        self._setups.close()
        if driver is not None:
            self._cq.wake()
            driver.join()
        for registered in buffers:
            if not registered.window.revoke():  # its memory stays registered
                self._stuck.append(registered)
