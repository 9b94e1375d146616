"""Relay broadcast: one tensor to many receivers, each passing it on to the next, so the
sender's link carries its bytes about once, whatever the number of receivers.

The sender (:meth:`Relays.broadcast`) offers each receiver a :class:`RelayDescriptor`
under the tensor's own key and the tensor itself to the receivers at the top of the
relay's tree (a chain by default), under the relay's data name. A receiver's recv of the
key gets the descriptor and follows it (:meth:`Relays.follow`): it fetches the tensor
from its parent into the recv's own result (``out=``, a device, as any recv), offers
that result to its children under the data name, confirms to the sender and settles
the recv. Everything moves as ordinary passive sends and recvs of the protocol the task
runs, so a parent that has not got the tensor yet simply holds its child's request:
the relay is pipelined at tensor granularity.

Failures: a receiver whose parent is gone (UnavailableError) tells the sender, which
offers it the tensor directly; the sender's handle completes for each receiver as its
confirmation comes and fails, naming it, for a receiver that died or never confirmed.
A recv that ends before its tensor came (its deadline, a cancel) leaves the descriptor
here, so the next recv of the key fetches it again; a tensor that came for a recv
nobody waits for any more is kept for the next recv of its key.
"""
from __future__ import annotations

import concurrent.futures
import itertools
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, Sequence

import numpy as np

from ..cluster import TaskName, parse_task
from ..devices import HOST, Device, device_of, host_array
from ..errors import TensorverbsError, UnavailableError, as_error
from ..out import Out
from ..tensor import dtype_enum, prepare
from .completion import SendHandle, Sends, describe_send
from .key import RendezvousKey
from .local import Value
from .recv_call import RecvCall, settle
from .relay_plan import PREFIX, RelayDescriptor, Relayed, ack_name, tree

if TYPE_CHECKING:
    from .. import _core
    from ..rpc.loop import EventLoopThread
    from ..rpc.peers import Peers
    from .lanes import Lanes

log = logging.getLogger(__name__)

#: what a receiver confirms under an ack name
HAVE_IT, NEED_IT = 1, 0
#: how long a receiver waits for its relay's parent to answer at all before it fetches the
#: tensor from the sender (a parent that ran and ended is not told from one not started)
REACH_SECONDS = 5.0
#: how long a receiver keeps what it passes on, that its children did not take, once its
#: step was cleaned up or aborted
PASS_ON_SECONDS = 60.0


class Transport(Protocol):
    """What a relay sends and receives through: the task's protocol (its rendezvous)."""

    def send(self, step_id: int, key: RendezvousKey, value: Value) -> None: ...

    def recv_async(self, key: RendezvousKey, step_id: int, timeout: float | None, device: Device = HOST,
                   out: Out | None = None) -> concurrent.futures.Future: ...

    def cleanup_step(self, step_id: int) -> None: ...


@dataclass
class _Following:
    """A receiver's relay of one (origin, name, step): what to fetch, whether from the
    sender directly by now, and a tensor that came for a recv nobody waited for."""

    descriptor: RelayDescriptor
    origin: TaskName
    direct: bool = False
    kept: Any = None


@dataclass
class _PassedOn:
    """What a receiver passed on at a relay's own step (``step``), for the recv of ``at``:
    the completions of its children's sends, and when ``at`` was cleaned up."""

    step: int
    at: int
    completions: list["_core.SendCompletion"]
    cleaned: float | None = None


@dataclass
class _Sent:
    """The sender's relay of one tensor: its array (offered again to a receiver whose
    parent is gone) and each receiver's ticket, settled by its confirmation."""

    tag: str
    name: str
    step: int
    array: Any
    receivers: list[TaskName]
    tickets: list["_core.SendTicket"]
    #: each receiver's confirmation being received
    acks: dict[int, concurrent.futures.Future] = field(default_factory=dict)


class Relays:
    """The relay broadcasts of one task: those it sends and those it follows."""

    def __init__(self, task: TaskName, incarnation: int, loop: "EventLoopThread", peers: "Peers",
                 lanes: "Lanes", sends: Sends, transport: Transport) -> None:
        self._task, self._incarnation, self._loop, self._peers, self._lanes = task, incarnation, loop, peers, lanes
        self._sends, self._rendezvous = sends, transport
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        #: (origin, name, step) -> the relay a recv of it follows, until its tensor is taken
        self._following: dict[tuple[TaskName, str, int], _Following] = {}
        #: step -> the relays this task sends at it whose receivers did not all confirm
        self._sent: dict[int, list[_Sent]] = {}
        #: parents that did not answer -> when (time.monotonic()): not waited for again
        #: within REACH_SECONDS * 12 unless they answer meanwhile
        self._unanswered: dict[TaskName, float] = {}
        #: what this task passed on that its children may not have taken yet
        self._passed: list[_PassedOn] = []
        #: step -> the recvs of it fetching a relayed tensor, and their fetches (None while
        #: the parent is reached)
        self._fetching: dict[int, dict[RecvCall, concurrent.futures.Future | None]] = {}

    # -- sending ---------------------------------------------------------------------------------
    def broadcast(self, name: str, array: np.ndarray, keys: Sequence[RendezvousKey], step: int,
                  fanout: int) -> SendHandle:
        """Offer ``array`` as ``name`` to each receiver of ``keys`` by relay, ``fanout``
        children per receiver in their order; its handle completes per receiver as each
        confirms."""
        tag = f"{PREFIX}{self._incarnation:x}:{next(self._ids)}"
        receivers = [key.dst for key in keys]
        sent = _Sent(tag, name, step, array, receivers,
                     [self._sends.open(describe_send(name, task, step)) for task in receivers])
        dtype, shape = dtype_enum(array.dtype), tuple(array.shape)
        plan = tree(len(receivers), fanout)
        try:
            for i, (parent, children) in enumerate(plan):
                descriptor = RelayDescriptor(tag, dtype, shape,
                                             str(self._task if parent < 0 else receivers[parent]),
                                             tuple(str(receivers[c]) for c in children))
                self._offer(step, receivers[i], name, descriptor.encode(), f"{name!r} (its relay)")
            for i, (parent, _) in enumerate(plan):  # delivered, as any send, once they take it
                if parent < 0:
                    self._offer(step, receivers[i], tag + ":data", array, ticket=sent.tickets[i])
        except TensorverbsError as exc:  # the step was aborted or cleaned up
            for ticket in sent.tickets:
                ticket.fail(int(exc.code), exc.message)
            raise
        with self._lock:
            self._sent.setdefault(step, []).append(sent)
        for i in range(len(receivers)):
            self._await_ack(sent, i, 0)
        return SendHandle(*(ticket.completion for ticket in sent.tickets))

    def _offer(self, step: int, dst: TaskName, name: str, array: Any, what: str = "",
               ticket: "_core.SendTicket | None" = None) -> None:
        """Offer ``array`` as ``name`` to ``dst``, a send of the relay's own (``what``, for
        its ticket; none: not tracked by ``flush``) or with the ``ticket`` of a relayed send."""
        key = RendezvousKey(self._task, self._incarnation, dst, name)
        if ticket is None and what:
            ticket = self._sends.open(f"{what} to {dst} at step {step}")
        try:
            self._rendezvous.send(step, key, Value(array, False, ticket))
        except TensorverbsError as exc:
            if ticket is not None:
                ticket.fail(int(exc.code), exc.message)
            raise

    def _await_ack(self, sent: _Sent, i: int, attempt: int) -> None:
        """Receive receiver ``i``'s ``attempt``-th confirmation."""
        key = RendezvousKey(sent.receivers[i], 0, self._task, ack_name(sent.tag, attempt))
        fut = sent.acks[i] = self._rendezvous.recv_async(key, sent.step, None)
        fut.add_done_callback(lambda f: self._acked(sent, i, attempt, f))

    def _acked(self, sent: _Sent, i: int, attempt: int, fut: concurrent.futures.Future) -> None:
        """Receiver ``i`` confirmed (or is gone): settle its ticket, or offer it the
        tensor directly if its parent is gone."""
        ticket, receiver = sent.tickets[i], sent.receivers[i]
        if fut.cancelled():  # its step ended (drop_step settled the ticket)
            return
        error = fut.exception()
        if error is None and int(np.asarray(fut.result()).reshape(-1)[0]) == NEED_IT and attempt == 0:
            try:
                self._offer(sent.step, receiver, sent.tag + ":direct", sent.array, ticket=ticket)
                self._await_ack(sent, i, 1)
                return
            except TensorverbsError as exc:
                error = exc
        if error is None:
            ticket.deliver()
        else:
            error = as_error(error, "its confirmation")
            ticket.fail(int(error.code), f"{receiver} did not confirm the relayed tensor: {error.message}")
        if all(ticket.completion.outcome() is not None for ticket in sent.tickets):  # all settled
            with self._lock:
                sent.array = None
                at_step = self._sent.get(sent.step, [])
                if sent in at_step:
                    at_step.remove(sent)
                if not at_step:
                    self._sent.pop(sent.step, None)

    # -- following -------------------------------------------------------------------------------
    def followed(self) -> bool:
        """Whether a relay came for a recv whose tensor was not taken yet."""
        return bool(self._following)

    def following(self, key: RendezvousKey, step: int) -> _Following | None:
        """The relay a recv of ``key`` at ``step`` follows, if one came and its tensor was
        not taken yet."""
        if not self._following:
            return None
        with self._lock:
            return self._following.get((key.src, key.name, step))

    def follow(self, call: RecvCall, relayed: Relayed | _Following) -> None:
        """Fetch the tensor of the relay that came for ``call`` and settle it so."""
        if isinstance(relayed, Relayed):
            state = _Following(relayed.descriptor, relayed.origin)
            with self._lock:
                state = self._following.setdefault((relayed.origin, call.key.name, call.step_id), state)
        else:
            state = relayed
        if state.kept is not None:  # came for a recv given up
            self._taken(call, state)
            call.future.returnable(self._keep, call.key.name, call.step_id, state, state.kept)
            if not settle(call.future, None, state.kept):
                self._keep(call.key.name, call.step_id, state, state.kept)
            return
        with self._lock:  # (the fetch may be at the relay's own step: drop_step ends it)
            self._fetching.setdefault(call.step_id, {})[call] = None
        self._fetch(call, state)

    def _fetch(self, call: RecvCall, state: _Following) -> None:
        """Fetch ``call``'s tensor from the relay's parent, once it answers (from the sender
        if it does not within REACH_SECONDS: it may have ended)."""
        if not state.direct and state.descriptor.parent != str(state.origin):
            parent = parse_task(state.descriptor.parent)
            if not self._peers.answered(parent):
                since = self._unanswered.get(parent)
                if since is not None and time.monotonic() - since < REACH_SECONDS * 12:
                    ago = time.monotonic() - since
                    self._parent_gone(call, state, UnavailableError(f"{parent} did not answer {ago:.0f} s ago"))
                    return
                probe = self._loop.submit(self._peers.reach(parent, REACH_SECONDS))
                probe.add_done_callback(lambda p: self._lanes.run(str(state.origin), self._reached, call, state, p))
                return
        self._start(call, state)

    def _reached(self, call: RecvCall, state: _Following, probe: concurrent.futures.Future) -> None:
        error = probe.exception()
        if error is None:
            self._start(call, state)
        else:
            self._unanswered[parse_task(state.descriptor.parent)] = time.monotonic()
            self._parent_gone(call, state, error)

    def _parent_gone(self, call: RecvCall, state: _Following, error: BaseException) -> None:
        """Fetch ``call``'s tensor from the sender: the relay's parent is gone (``error``)."""
        log.info("%s: the relay's parent %s is gone (%s); fetching from %s", call.what, state.descriptor.parent,
                 error, state.origin)
        state.direct = True
        self._confirm(call.step_id, state, NEED_IT)
        self._start(call, state)

    def _start(self, call: RecvCall, state: _Following) -> None:
        descriptor = state.descriptor
        source = state.origin if state.direct else parse_task(descriptor.parent)
        name = descriptor.direct if state.direct else descriptor.data
        # the sender offers at the recv's step, a receiver at the relay's own
        step = call.step_id if source == state.origin else descriptor.step
        key = RendezvousKey(source, 0, self._task, name)
        try:
            fut = self._rendezvous.recv_async(key, step, call.time_left(), call.device, call.out)
        except TensorverbsError as exc:
            self._fetch_ended(call)
            settle(call.future, exc)
            return
        with self._lock:
            fetching = self._fetching.get(call.step_id, {})
            ended = call not in fetching  # its step ended meanwhile
            if not ended:
                fetching[call] = fut
        if ended:
            fut.cancel()
            return
        fut.add_done_callback(lambda f: self._fetched(call, state, f))

    def _fetch_ended(self, call: RecvCall) -> None:
        with self._lock:
            fetching = self._fetching.get(call.step_id, {})
            fetching.pop(call, None)
            if not fetching:
                self._fetching.pop(call.step_id, None)

    def _fetched(self, call: RecvCall, state: _Following, fut: concurrent.futures.Future) -> None:
        """The fetch of ``call``'s tensor ended: pass it on and confirm, fetch it from the
        sender if the parent is gone, or fail the recv (the relay kept for its next recv)."""
        if fut.cancelled():  # its step ended: drop_step failed the recv
            return
        error = fut.exception()
        origin, descriptor = state.origin, state.descriptor
        if isinstance(error, UnavailableError) and not state.direct and descriptor.parent != str(origin):
            self._parent_gone(call, state, error)  # (fetching still: from the sender now)
            return
        self._fetch_ended(call)
        if error is None:
            result = fut.result()
            try:
                self._pass_on(call.step_id, descriptor, result)
            finally:
                self._confirm(call.step_id, state, HAVE_IT)
            self._taken(call, state)
            try:
                call.future.returnable(self._keep, call.key.name, call.step_id, state, result)
                if settle(call.future, None, result):
                    return
            except ReferenceError:  # a parked recv's future, dropped
                pass
            self._keep(call.key.name, call.step_id, state, result)
            return
        settle(call.future, as_error(error, f"{call.what}: fetching the relayed tensor from "
                                            f"{origin if state.direct else descriptor.parent}"))

    def _pass_on(self, at: int, descriptor: RelayDescriptor, result: Any) -> None:
        """Offer ``result``, received at step ``at``, to ``descriptor``'s children under
        the relay's data name at its own step: kept until they take it, or PASS_ON_SECONDS
        after ``at`` is cleaned up."""
        if not descriptor.children:
            return
        array = prepare(host_array(result, device_of(result))[0])
        completions = []
        for child in descriptor.children:
            ticket = self._sends.open(f"a relayed tensor to {child} at step {at}")
            completions.append(ticket.completion)
            try:
                self._offer(descriptor.step, parse_task(child), descriptor.data, array, ticket=ticket)
            except TensorverbsError as exc:
                log.warning("passing a relayed tensor on to %s failed: %s", child, exc)
        with self._lock:
            self._passed.append(_PassedOn(descriptor.step, at, completions))
        self._sweep()

    def _confirm(self, step: int, state: _Following, what: int) -> None:
        """Tell the relay's sender that this task has its tensor (or needs it directly)."""
        name = ack_name(state.descriptor.tag, 1 if state.direct and what == HAVE_IT else 0)
        try:
            self._offer(step, state.origin, name, np.array([what], np.uint8))  # (flush waits not for it)
        except TensorverbsError as exc:
            log.warning("confirming a relayed tensor to %s failed: %s", state.origin, exc)

    def _keep(self, name: str, step: int, state: _Following, result: Any) -> None:
        """Keep ``result``, the tensor of ``state``, for the next recv of ``name`` at ``step``
        (its recv was given up, or gave it back)."""
        state.kept = result
        with self._lock:
            self._following[(state.origin, name, step)] = state

    def _taken(self, call: RecvCall, state: _Following) -> None:
        with self._lock:
            if self._following.get((state.origin, call.key.name, call.step_id)) is state:
                del self._following[(state.origin, call.key.name, call.step_id)]

    def drop_step(self, step: int, error: TensorverbsError) -> None:
        """Forget the relays of ``step`` (cleaned up or aborted: ``error``): those sent fail
        for each receiver that did not confirm yet, the recvs fetching a relayed tensor
        fail; what was passed on stays a while."""
        if not (self._following or self._sent or self._passed or self._fetching):  # (most steps of most tasks)
            return
        with self._lock:
            for at in [at for at in self._following if at[2] == step]:
                del self._following[at]
            sent = self._sent.pop(step, [])
            fetching = self._fetching.pop(step, {})
            for passed in self._passed:
                if passed.at == step and passed.cleaned is None:
                    passed.cleaned = time.monotonic()
        for relay in sent:
            for i, ticket in enumerate(relay.tickets):
                ticket.fail(int(error.code), error.message)
                relay.acks[i].cancel()
        for call, fut in fetching.items():
            settle(call.future, error)
            if fut is not None:
                fut.cancel()
        self._sweep()

    def _sweep(self) -> None:
        """Clean up the relays' own steps of what this task passed on that its children
        took, or did not within PASS_ON_SECONDS of the step it came at being cleaned up."""
        now, done, kept = time.monotonic(), list[_PassedOn](), list[_PassedOn]()
        with self._lock:
            for passed in self._passed:
                taken = all(completion.outcome() is not None for completion in passed.completions)
                late = passed.cleaned is not None and now - passed.cleaned >= PASS_ON_SECONDS
                (done if taken or late else kept).append(passed)
            self._passed = kept
        for passed in done:
            self._rendezvous.cleanup_step(passed.step)
