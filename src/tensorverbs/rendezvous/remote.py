"""The remote-rendezvous base: local recvs go to the table, remote ones to a protocol.

Each protocol ("grpc", "grpc+verbs") subclasses :class:`RemoteRendezvous` and implements
:meth:`~RemoteRendezvous.recv_from_remote`. What every protocol needs is done here once:
deadlines, aborting a step's pending recvs, the caller cancelling its future; turning a
received value into what the caller gets, and counting it, is :mod:`.delivery`'s, a recv
and its settling :mod:`.recv_call`'s, for every protocol alike.

A tensor that arrives for a recv whose caller already gave up (its deadline passed just
as the tensor was sent) is not lost: it is kept and handed to the next recv of the same
key and step. A tensor that must be copied to its device (or opened from a handle) is
delivered on the lane of its peer (:mod:`.lanes`), never on the event loop or in the
thread of the send that completed a local recv; a recv's future is settled whatever its
delivery raises.
"""
from __future__ import annotations

import abc
import collections
import concurrent.futures
import dataclasses
import functools
import threading
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Hashable, Sequence

import numpy as np

from ..devices import HOST, Device
from ..errors import AbortedError, CancelledError, TensorverbsError, from_code
from ..out import Out
from . import collected
from .blocks import Blocks
from .deadlines import Deadline
from .delivery import Delivery
from .future import RecvFuture, add_internal_callback, started
from .key import RendezvousKey
from .local import Value
from .recv_call import PendingRecv, RecvCall

if TYPE_CHECKING:
    from ..cluster import TaskName
    from ..runtime import TaskRuntime
    from ..verbs.config import RdmaConfig


@dataclass(frozen=True)
class ProtocolOptions:
    """What the Server was asked for that only its protocol uses (the task keeps none of it)."""

    #: the RDMA_* settings: grpc+verbs's core, the largest tensor either protocol takes
    rdma_config: "RdmaConfig"
    #: how many tasks may join at run time beyond the cluster's (grpc+verbs sizes its core for them)
    spare_tasks: int = 0
    #: where the task listens (host:port), when not at its address in the cluster
    bind: str | None = None


class RemoteRendezvous(abc.ABC):
    """The rendezvous of one task."""

    protocol: str

    def __init__(self, runtime: "TaskRuntime", options: ProtocolOptions) -> None:
        self.rt = runtime
        self.options = options
        self.delivery = Delivery(runtime)
        self._lock = threading.RLock()
        # future -> (call, how it is pending); keyed by the future so that nothing the
        # future holds (its done callbacks, deadline timers) refers back to the call: a
        # result is freed as soon as the caller drops it and its future
        self._ops: dict[concurrent.futures.Future, tuple[RecvCall, PendingRecv]] = {}
        self._late: dict[tuple[int, Hashable], collections.deque[Value]] = {}
        self._stopped = False
        collected.start()  # (the give-backs of recv futures the garbage collector frees)

    def start(self) -> None:
        """Bring up what the protocol needs beyond gRPC."""

    def setup_handler(self) -> Callable[[Any], Any] | None:
        """What answers the peers' channel set-up calls (GetRemoteAddress); None when the
        protocol needs no set-up beyond gRPC."""
        return None

    def add_task(self, task: TaskName, address: str, replace: bool = False) -> None:
        """Learn ``task``, which joined the cluster at run time at ``address``: the cluster
        grows. A task known at another address is InvalidArgumentError, unless
        ``replace``: it moved there (it restarted), and calls to it go there from now on."""
        known = task in set(self.rt.cluster.tasks())
        if self.rt.cluster.add_task(task.job, task.task, address, replace=replace) and known:
            self.moved(task)

    def knows(self, task: TaskName) -> bool:
        """Whether ``task`` is in the cluster, at an address it is known to be at."""
        return task in set(self.rt.cluster.tasks())

    def moved(self, task: TaskName) -> None:
        """``task`` is at another address now: its channels are set up afresh there (the
        old one closes before the event loop runs anything asked of it later)."""
        self.rt.loop.submit(self.rt.peers.forget(task))

    def allocate(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """An uninitialised array that this protocol sends without preparing it first."""
        return np.empty(shape, dtype)

    def send(self, step_id: int, key: RendezvousKey, value: Value) -> None:
        """Offer ``value``, a tensor of this task (AbortedError if the step is aborted)."""
        self.rt.table.send(step_id, key, value)

    def watch(self, step_id: int, name: str, watcher: Callable[[TaskName], None]) -> None:
        """Tell ``watcher`` each task whose recv of ``name`` at ``step_id`` waits for a send
        of this task, now or later, until :meth:`unwatch` (a relay broadcast's late
        receivers): from a thread of the protocol's, or this call's for recvs waiting
        already; it must not block."""
        self.rt.table.watch(step_id, name, watcher)

    def unwatch(self, step_id: int, name: str) -> None:
        """Stop telling the recvs of ``name`` at ``step_id``."""
        self.rt.table.unwatch(step_id, name)

    def send_many(self, offers: Sequence[tuple[int, RendezvousKey, Value]]) -> tuple[int, TensorverbsError] | None:
        """Offer each ``(step_id, key, value)`` in order, as :meth:`send`: None once all are,
        else the index and error of the first that could not be (the later ones are not)."""
        for i, (step_id, key, value) in enumerate(offers):
            try:
                self.send(step_id, key, value)
            except TensorverbsError as exc:
                return i, exc
        return None

    def recv_many(self, keys: Sequence[RendezvousKey], steps: Sequence[int], timeout: float | None
                  ) -> list[Any] | None:
        """Many recvs of host arrays, of ``keys[i]`` at ``steps[i]``, in one call: each one's
        array or TensorverbsError, in order; None when the protocol has no such call (then
        each recv goes its own way)."""
        return None

    def send_blocks(self, step_id: int, key: RendezvousKey, blocks: Blocks, ticket: Any
                    ) -> tuple[int, TensorverbsError] | None:
        """Offer each block of ``blocks`` to ``key.dst`` (``key`` names the batch), each
        carrying ``ticket`` (opened for ``len(blocks)`` parts): None once all are offered,
        else (index, error) of the first refused, the later ones not offered and the ticket
        failed."""
        offers = [(step_id, dataclasses.replace(key, name=blocks.entry(i)), Value(blocks.array[row, ...], False, ticket))
                  for i, row in enumerate(blocks.rows.tolist())]
        failed = self.send_many(offers)
        if failed is not None:
            ticket.fail(int(failed[1].code), failed[1].message)
        return failed

    def recv_blocks(self, key: RendezvousKey, step_id: int, blocks: Blocks, timeout: float | None
                    ) -> list[tuple[int, TensorverbsError]] | None:
        """Receive every block of ``blocks`` from ``key.src`` (``key`` names the batch) into
        its row at once, where the protocol can: the entries that failed, (index, error),
        a tensor that came but does not fit its row kept for the next recv of it; None when
        the protocol has no such call (then each block goes its own way)."""
        return None

    def broadcast(self, step_id: int, keys: Sequence[RendezvousKey], value: Value,
                  tickets: Sequence[Any]) -> None:
        """Offer ``value`` under each of ``keys`` (a send each, ``tickets`` one each);
        the error of a send that failed names its receiver and fails its ticket (each
        ticket whose send was not made fails so), the others are offered."""
        failed = []
        for key, ticket in zip(keys, tickets):
            try:
                self.send(step_id, key, Value(value.array, value.is_dead, ticket))
            except TensorverbsError as exc:
                failed.append((key, int(exc.code), exc.message))
                ticket.fail(int(exc.code), exc.message)
        raise_failed_sends(failed)

    def pending(self) -> tuple[int, int]:
        """(tensors of this task waiting for their recv, recvs of them waiting for a send)."""
        return self.rt.table.pending()

    def table_steps(self) -> int:
        """Steps this task's table holds state for."""
        return self.rt.table.steps()

    def recv(self, key: RendezvousKey, step_id: int, timeout: float | None,
             device: Device = HOST, out: Out | None = None) -> Any:
        """Receive (blocking); see :meth:`recv_async`. A signal handler's exception
        (Ctrl-C's KeyboardInterrupt) raised while it waits gives the recv up: its tensor
        goes to the next recv of its key and step."""
        call = RecvCall(key, step_id, device, timeout, out=out)
        try:
            self._begin(call)
            return call.future.result()
        except BaseException:
            self.give_up(call.future)
            raise

    def stop(self) -> None:
        """Fail every pending recv and release the protocol's resources."""
        with self._lock:
            self._stopped = True
            pending, self._ops = list(self._ops.values()), {}
            self._late.clear()
        for call, op in pending:
            if call.fail(CancelledError("the server stopped")):
                op.cancel()

    def recv_async(self, key: RendezvousKey, step_id: int, timeout: float | None,
                   device: Device = HOST, out: Out | None = None, *, own: bool = False) -> concurrent.futures.Future:
        """Start a recv; the future yields the tensor (on ``device``, or ``out`` filled
        with it) or raises a TensorverbsError. ``own``: the library's own recv (a relay's
        fetch), which the public call that runs it does not give up or back when
        interrupted: whoever started it does."""
        call = RecvCall(key, step_id, device, timeout, out=out, future=self.future(key))
        try:
            if not own:
                started(call.future)
            self._begin(call)
        except BaseException:  # a signal's exception as it started
            self.give_up(call.future)
            raise
        return call.future

    def future(self, key: RendezvousKey) -> RecvFuture:
        """The future of a recv of ``key``, running its caller's callbacks on the lane of
        ``key.src``."""
        return RecvFuture(self.rt.lanes, str(key.src))

    def follow(self, relay: Any, key: RendezvousKey, step_id: int, timeout: float | None,
               device: Device = HOST, out: Out | None = None) -> RecvFuture:
        """The future of a recv of ``key`` that follows ``relay``, a relay descriptor that
        came for it (:class:`~.relay_plan.Relayed`, now or for an earlier recv of it)."""
        call = RecvCall(key, step_id, device, timeout, self.future(key), out=out)
        started(call.future)  # (interrupted, the public call gives it up: its fetch ends with it)
        self.rt.relays.follow(call, relay)
        return call.future

    def _begin(self, call: RecvCall) -> None:
        """Start ``call``: from the local table, or through the protocol."""
        key, step_id, timeout, fut = call.key, call.step_id, call.timeout, call.future
        with self._lock:  # against a concurrent abort_step of this step, or stop
            if self._stopped:
                call.fail(CancelledError("the server stopped"))
                return
            if key.src == self.rt.task:
                waiter = self.rt.table.recv_async(step_id, key, functools.partial(self._local, call))
                op: PendingRecv | None = _LocalRecv(waiter) if waiter is not None else None
            else:
                op = self._remote(call)
            if op is None or fut.done():
                return
            self._ops[fut] = (call, op)
        deadline = (self.rt.deadlines.add(timeout, self._expire, weakref.ref(fut), timeout)
                    if timeout is not None else None)
        add_internal_callback(fut, functools.partial(self._done, deadline))

    def give_up(self, fut: concurrent.futures.Future) -> None:
        """Give the recv of ``fut`` up (its caller was interrupted, maybe as it started):
        withdrawn if pending, even before it was registered to be; its tensor handed to
        the next recv of its key and step if it came."""
        if fut.cancel():
            self._done(None, fut)
        elif isinstance(fut, RecvFuture):
            fut.give_back()  # interrupted as the tensor came

    def _local(self, call: RecvCall, error: TensorverbsError | None, value: Value | None) -> None:
        """The local table's answer to ``call``."""
        if value is not None:
            self.complete(call, value)
        elif error is not None:
            call.fail(error)

    def _remote(self, call: RecvCall) -> PendingRecv | None:
        error = self.rt.table.aborted(call.step_id)
        if error is not None:
            call.fail(error)
            return None
        late = self._late.get(call.match)
        if late:
            value = late.popleft()
            if not late:
                del self._late[call.match]
            self.complete(call, value)  # counted as received when it arrived
            return None
        return self.recv_from_remote(call)

    def _done(self, deadline: Deadline | None, fut: concurrent.futures.Future) -> None:
        if deadline is not None:
            deadline.cancel()
        with self._lock:
            call, op = self._ops.pop(fut, (None, None))
        if op is not None and fut.cancelled():
            op.cancel()

    def _expire(self, ref: "weakref.ref[concurrent.futures.Future]", timeout: float) -> None:
        fut = ref()
        entry = self._ops.get(fut) if fut is not None else None
        if entry is None:
            return
        call, op = entry
        if op.peer_answered():  # the recv goes on while the peer tells what it holds
            self.rt.loop.submit(self._time_out(call, op, op.deadline_error(call, timeout)))
        elif call.fail(op.deadline_error(call, timeout)):
            op.cancel()

    async def _time_out(self, call: RecvCall, op: PendingRecv, error: TensorverbsError) -> None:
        """Fail ``call`` with ``error``, saying what its peer holds under its name."""
        said = ""
        try:
            said = await self.held(call.key, call.step_id)
        finally:
            if call.fail(type(error)(error.message + said)):
                op.cancel()

    async def held(self, key: RendezvousKey, step_id: int) -> str:
        """What ``key.src`` holds for this task under ``key.name`` (or close to it at
        ``step_id``), for the message of a recv that timed out ("" if it cannot tell)."""
        return await self.rt.peers.held(key.src, self.rt.task, key.name, step_id)

    def complete(self, call: RecvCall, value: Value, nbytes: int | None = None) -> None:
        """Deliver ``value`` to ``call``'s caller on its device (:mod:`.delivery`).
        ``nbytes`` (the bytes that crossed the network) counts it as received from a peer.
        If the caller gave up, the value goes to another recv of the same key and step in
        flight (whose own request is then withdrawn), else back to the local table (a local
        value) or aside for the next recv (a remote one): it is never dropped. So does a
        value the caller's ``out`` refuses."""
        if nbytes is not None:
            self.delivery.observe(call.key.src, nbytes, call.started, count=True)
        if self.delivery.on_lane(call, value):
            self.delivery.run_on_lane(call, self._hand_over, call, value)
        else:
            self._hand_over(call, value)

    def _hand_over(self, call: RecvCall, value: Value) -> None:
        if self.delivery.settle(call, value, give_back=self._returner(call)):
            value.delivered()  # a local recv took this task's own tensor: its send completes
        else:
            self._pass_on(call.key, call.step_id, call.out, value)

    def _returner(self, call: RecvCall) -> Callable[[Value], None]:
        """How ``call``'s future gives its tensor back: :meth:`_pass_on` (holding nothing
        that refers back to the future: a result is freed with its future)."""
        return functools.partial(self._pass_on, call.key, call.step_id, call.out)

    def _pass_on(self, key: RendezvousKey, step_id: int, out: Out | None, value: Value) -> None:
        """Hand ``value``, which the recv of ``key`` at ``step_id`` (into ``out``) gave up,
        refused or gave back, to another recv of its key and step in flight, else back to
        the local table or aside for the next."""
        match = (step_id, key.matching)
        while True:
            if out is not None and value.array is out.landing:
                value = Value(value.array.copy(), value.is_dead, value.ticket)  # that caller may reuse out
            with self._lock:
                other = next(((c, op) for c, op in self._ops.values()
                              if c.match == match and not c.future.done()), None)
                if other is None:
                    if key.src == self.rt.task:
                        self.rt.table.requeue(step_id, key, value)
                    elif self.rt.table.aborted(step_id) is None:
                        self._late.setdefault(match, collections.deque()).append(value)
                    return
            call, op = other
            op.cancel()
            if self.delivery.settle(call, value, give_back=self._returner(call)):
                value.delivered()
                return
            out = call.out

    def abort_step(self, step_id: int, error: AbortedError) -> None:
        """Fail the step's pending recvs (local and remote) and refuse its later ones."""
        with self._lock:
            self.rt.table.abort_step(step_id, error)
            ops = [(c, op) for c, op in self._ops.values() if c.step_id == step_id]
            self._drop_late(step_id)
        for call, op in ops:
            if call.fail(AbortedError(error.message)):
                op.cancel()

    def cleanup_step(self, step_id: int) -> None:
        """Forget the step in the table and here."""
        with self._lock:
            self.rt.table.cleanup_step(step_id)
            self._drop_late(step_id)

    def _drop_late(self, step_id: int) -> None:
        for match in [m for m in self._late if m[0] == step_id]:
            del self._late[match]

    @abc.abstractmethod
    def recv_from_remote(self, call: RecvCall) -> PendingRecv:
        """Start fetching ``call.key`` from ``call.key.src``; end with :meth:`complete` or
        ``call.fail``."""


class _LocalRecv(PendingRecv):
    """A recv from this task's own table, waiting for its send."""

    def __init__(self, waiter) -> None:
        self._waiter = waiter

    def cancel(self) -> None:
        self._waiter.cancel()


def raise_failed_sends(failed: Sequence[tuple[RendezvousKey, int, str]]) -> None:
    """Raise the error (its code, its message) of the first send of a broadcast that
    failed, naming each that did; nothing when none did."""
    if failed:
        raise from_code(failed[0][1], "; ".join(
            f"send of {key.name!r} to {key.dst}: {message}" for key, _, message in failed))
