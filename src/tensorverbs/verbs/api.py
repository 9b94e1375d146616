"""The provider-neutral verbs objects: Context, ProtectionDomain, MemoryRegion,
CompletionQueue and QueuePair, as abstract classes that each provider implements.

The protocol above (``tensorverbs.rdma``) uses only these classes. What is the same for
every provider lives here once: send-queue accounting with back-pressure (work requests
beyond the queue depth wait in a software queue instead of failing), flushing of that
queue when a queue pair enters the error state, and context-manager cleanup.
"""
from __future__ import annotations

import abc
import collections
import dataclasses
import threading
from typing import TYPE_CHECKING, Any, Sequence

from ..errors import InvalidArgumentError, ResourceExhaustedError
from .model import (
    SGE, Access, DeviceAttr, QPEndpoint, QPState, RecvWR, SendWR, WcOpcode, WorkCompletion,
)

if TYPE_CHECKING:
    from .config import RdmaConfig


class _Resource(abc.ABC):
    """A verbs object that frees what it holds on ``close()`` or at the end of a ``with``."""

    closed = False

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._close()

    @abc.abstractmethod
    def _close(self) -> None: ...

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Provider(abc.ABC):
    """A verbs implementation ("soft", "ibverbs"), registered in :mod:`.registry`."""

    name: str

    @abc.abstractmethod
    def availability(self) -> tuple[bool, str]:
        """(usable here, why or why not)."""

    @abc.abstractmethod
    def devices(self) -> list[DeviceAttr]:
        """The devices this provider sees."""

    @abc.abstractmethod
    def open(self, config: "RdmaConfig", listen_host: str | None = None) -> "Context":
        """Open the configured device. ``listen_host`` is the address peers reach this
        process at (used by providers that carry traffic over IP themselves)."""


class Context(_Resource):
    """An open device (``ibv_context``)."""

    provider: str
    device: DeviceAttr

    @abc.abstractmethod
    def alloc_pd(self) -> "ProtectionDomain": ...

    @abc.abstractmethod
    def create_cq(self, depth: int) -> "CompletionQueue": ...

    @abc.abstractmethod
    def create_qp(self, pd: "ProtectionDomain", send_cq: "CompletionQueue",
                  recv_cq: "CompletionQueue", max_send_wr: int, max_recv_wr: int) -> "QueuePair": ...


class ProtectionDomain(_Resource):
    """A protection domain (``ibv_pd``): the scope of memory registrations."""

    @abc.abstractmethod
    def reg_mr(self, buffer: Any, access: Access) -> "MemoryRegion":
        """Register caller-owned memory (any writable buffer-protocol object, kept alive
        by the region)."""

    @abc.abstractmethod
    def alloc_mr(self, length: int, access: Access) -> "MemoryRegion":
        """Allocate ``length`` bytes of pre-faulted memory owned by the region and register
        it; it is reachable by every peer the provider can connect to."""


class MemoryRegion(_Resource):
    """A registered memory region (``ibv_mr``). ``buf`` is a writable view of its bytes."""

    addr: int
    length: int
    lkey: int
    rkey: int
    access: Access
    buf: memoryview

    def sge(self, offset: int = 0, length: int | None = None) -> SGE:
        """The scatter/gather element for ``length`` bytes at ``offset`` in this region."""
        if length is None:
            length = self.length - offset
        if offset < 0 or length < 0 or offset + length > self.length:
            raise InvalidArgumentError(
                f"range [{offset}, {offset + length}) is outside the {self.length}-byte region")
        return SGE(self.addr + offset, length, self.lkey)


#: wr_id of the completions a queue pair requests for itself (selective signaling)
INTERNAL_WR_ID = (1 << 64) - 1


class CompletionQueue(_Resource):
    """A completion queue (``ibv_cq``), shared by the queue pairs created on it."""

    def __init__(self) -> None:
        self._qps: dict[int, QueuePair] = {}
        self._synthetic: collections.deque[WorkCompletion] = collections.deque()

    def poll(self, max_entries: int = 64) -> list[WorkCompletion]:
        """Return up to ``max_entries`` completions without blocking."""
        wcs = self._poll(max_entries)
        return self._account(wcs + self._drain_synthetic(max_entries - len(wcs)))

    def wait(self, timeout: float | None = None, max_entries: int = 64) -> list[WorkCompletion]:
        """Block until at least one completion arrives (without spinning) or ``timeout``
        seconds pass; return what arrived, possibly nothing. The provider's completions
        come before flushes made here, as on hardware (earlier requests first)."""
        if self._synthetic:
            return self.poll(max_entries)
        return self._account(self._wait(timeout, max_entries))

    def _drain_synthetic(self, max_entries: int) -> list[WorkCompletion]:
        out = []
        while self._synthetic and len(out) < max_entries:
            out.append(self._synthetic.popleft())
        return out

    def _account(self, wcs: list[WorkCompletion]) -> list[WorkCompletion]:
        """Retire completed send requests; drop the successful completions that queue
        pairs requested for themselves."""
        for wc in wcs:
            if wc.opcode < WcOpcode.RECV:
                qp = self._qps.get(wc.qp_num)
                if qp is not None:
                    qp._send_completed(wc)
        if any(wc.wr_id == INTERNAL_WR_ID for wc in wcs):
            wcs = [wc for wc in wcs if wc.wr_id != INTERNAL_WR_ID or not wc.ok]
        return wcs

    def push(self, wc: WorkCompletion) -> None:
        """Queue a completion made outside the provider (flushes of queued requests)."""
        self._synthetic.append(wc)
        self.wake()

    @abc.abstractmethod
    def _poll(self, max_entries: int) -> list[WorkCompletion]: ...

    @abc.abstractmethod
    def _wait(self, timeout: float | None, max_entries: int) -> list[WorkCompletion]: ...

    @abc.abstractmethod
    def wake(self) -> None:
        """Make a concurrent :meth:`wait` return now (for shutdown and synthetic entries)."""


class QueuePair(_Resource):
    """A reliable-connected queue pair (``ibv_qp``) with send-queue back-pressure.

    ``post_send`` never fails for lack of room: work requests beyond ``max_send_wr``
    outstanding wait in order in a software queue and are posted as earlier ones
    complete. Unsignaled requests cost no completion; after half a queue of them in a
    row, one is signaled on the queue pair's own behalf (and its completion is not
    shown), so the send queue keeps draining. In the error state requests go straight
    to the provider, which flushes them with ``WR_FLUSH_ERR`` after what it already holds
    (as hardware does), so completions keep the order of the requests.
    """

    qp_num: int

    def __init__(self, send_cq: CompletionQueue, recv_cq: CompletionQueue,
                 max_send_wr: int, max_recv_wr: int) -> None:
        self.send_cq = send_cq
        self.recv_cq = recv_cq
        self.max_send_wr = max_send_wr
        self.max_recv_wr = max_recv_wr
        self._sq_lock = threading.Lock()
        self._inflight: collections.deque[bool] = collections.deque()  # signaled flags
        self._waiting: collections.deque[SendWR] = collections.deque()
        self._unsignaled = 0  # unsignaled requests posted since the last signaled one
        self.state = QPState.INIT

    def _register(self) -> None:
        """Call once ``qp_num`` is known, so the CQs can route completions back here."""
        self.send_cq._qps[self.qp_num] = self
        self.recv_cq._qps[self.qp_num] = self

    # -- send queue --------------------------------------------------------------------
    def post_send(self, wr: SendWR) -> None:
        """Post ``wr``; it runs now if the send queue has room, later otherwise."""
        self.post_send_batch((wr,))

    def post_send_batch(self, wrs: Sequence[SendWR]) -> None:
        """Post several requests in order as one batch (one doorbell, like a chain of work
        requests given to ``ibv_post_send``, where the provider can)."""
        for wr in wrs:
            self._check_send(wr)
        with self._sq_lock:
            if self.state == QPState.ERR:
                self._post_send_batch(list(wrs))
                return
            ready = []
            for wr in wrs:
                if self._waiting or len(self._inflight) + len(ready) >= self.max_send_wr:
                    self._waiting.append(wr)
                else:
                    ready.append(wr)
            self._issue(ready)

    def _send_completed(self, wc: WorkCompletion) -> None:
        """A send-side completion retires every request up to the completed one."""
        with self._sq_lock:
            while self._inflight:
                if self._inflight.popleft():
                    break
            ready = []
            while self._waiting and len(self._inflight) + len(ready) < self.max_send_wr \
                    and self.state != QPState.ERR:
                ready.append(self._waiting.popleft())
            self._issue(ready)

    def _issue(self, wrs: list[SendWR]) -> None:
        """Hand ``wrs`` to the provider (under the send-queue lock, with room), signaling
        one of every half queue of unsignaled requests on the queue pair's own behalf."""
        if not wrs:
            return
        for i, wr in enumerate(wrs):
            if wr.signaled:
                self._unsignaled = 0
            elif self._unsignaled + 1 >= max(1, self.max_send_wr // 2):
                wrs[i] = dataclasses.replace(wr, wr_id=INTERNAL_WR_ID, signaled=True)
                self._unsignaled = 0
            else:
                self._unsignaled += 1
            self._inflight.append(wrs[i].signaled)
        self._post_send_batch(wrs)

    @property
    def send_backlog(self) -> int:
        """How many work requests wait for room in the send queue."""
        return len(self._waiting)

    def to_error(self, reason: str) -> None:
        """Move to the error state: outstanding work completes with ``WR_FLUSH_ERR``."""
        with self._sq_lock:
            if self.state == QPState.ERR:
                return
            self.state = QPState.ERR
            self._enter_error(reason)
            waiting, self._waiting = list(self._waiting), collections.deque()
            if waiting:
                self._post_send_batch(waiting)

    # -- receive queue -------------------------------------------------------------------
    def post_recv(self, wr: RecvWR) -> None:
        """Post a receive; raises ResourceExhaustedError past ``max_recv_wr`` outstanding."""
        if self.state != QPState.ERR and self._recv_outstanding() >= self.max_recv_wr:
            raise ResourceExhaustedError(
                f"receive queue of QP {self.qp_num} is full ({self.max_recv_wr} requests)")
        self._post_recv(wr)

    # -- provider hooks ------------------------------------------------------------------
    @abc.abstractmethod
    def endpoint(self) -> QPEndpoint:
        """What the peer needs to connect to this queue pair."""

    @abc.abstractmethod
    def connect(self, remote: QPEndpoint) -> None:
        """Take the queue pair to RTS towards ``remote`` (INIT -> RTR -> RTS). Raises
        InvalidArgumentError for an endpoint of another provider and UnavailableError when
        the peer cannot be reached."""

    def _check_send(self, wr: SendWR) -> None:
        """Refuse a request the provider can never take (raise), before it is queued."""

    def _post_send_batch(self, wrs: list[SendWR]) -> None:
        """Hand several requests to the provider at once; by default one by one."""
        for wr in wrs:
            self._post_send(wr)

    @abc.abstractmethod
    def _post_send(self, wr: SendWR) -> None:
        """Hand ``wr`` to the provider (under a lock): the send queue has room, or the queue
        pair is in the error state and the provider flushes it."""

    @abc.abstractmethod
    def _post_recv(self, wr: RecvWR) -> None: ...

    @abc.abstractmethod
    def _recv_outstanding(self) -> int: ...

    @abc.abstractmethod
    def _enter_error(self, reason: str) -> None:
        """Provider part of :meth:`to_error` (under the send-queue lock): flush what the
        provider holds, and flush whatever is posted from now on."""
