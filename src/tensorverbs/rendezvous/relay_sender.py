"""The sending side of a relay broadcast (:class:`RelaySender`): the sender offers each
receiver a :class:`~.relay_plan.RelayDescriptor` under the tensor's own key, and the
tensor itself (a large one in parts) to the receivers at the top of the relay's tree under
the relay's data name (each part's name);
each receiver's send completes as it confirms, or as it takes the tensor from the sender.
A receiver whose parent is gone asks for the tensor, which the sender then offers it
directly.

A relay that serves late receivers (``late``) watches the recvs of its name at its step
that no send matches: a task not among its receivers that asks for it is offered a
descriptor naming a receiver that confirmed it has the tensor (a replica, asked first to
offer it: ServeRelayed; the least used first, one that did not serve it asked no more),
or this task while none does, or one saying that nobody keeps it any more (the recv fails).
A late receiver keeps nothing for others: what it got is its own.
A task serves the latest late relay of each name (MAX_LATE at most): until the step is
cleaned up or a later late relay of the name is sent; from this task's own tensor only
while no later late relay sent the same memory (it may have changed)."""
from __future__ import annotations

import concurrent.futures
import functools
import itertools
import logging
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from ..cluster import TaskName
from ..errors import AbortedError, TensorverbsError, as_error
from ..tensor import dtype_enum
from .completion import SendHandle, Sends, describe_send
from .key import RendezvousKey
from .relay_offers import HAVE_IT, NEED_IT, RelayOffers, Transport
from .relay_plan import PREFIX, RelayDescriptor, ack_name, direct_name, part_count, pieces, tree

if TYPE_CHECKING:
    from .. import _core
    from ..rpc.loop import EventLoopThread
    from ..rpc.peers import Peers

log = logging.getLogger(__name__)

#: the most relays that serve late receivers at once (the oldest stop first)
MAX_LATE = 1024
#: how long the sender waits for a replica to answer ServeRelayed before it asks another
ASK_SECONDS = 5.0


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
    dtype: int = 0
    shape: tuple[int, ...] = ()
    parts: int = 1
    #: it serves late receivers: the tasks that confirmed they have it (the replicas), with
    #: how many late receivers each served, the late receivers, and their confirmations;
    #: whether its array is as sent (no later late relay sent the same memory)
    late: bool = False
    own: bool = True
    have: dict[TaskName, int] = field(default_factory=dict)
    joiners: set[TaskName] = field(default_factory=set)
    late_acks: list[concurrent.futures.Future] = field(default_factory=list)

    def settled(self) -> bool:
        """Whether each receiver's send settled (it has the tensor, or failed)."""
        return all(ticket.completion.outcome() is not None for ticket in self.tickets)

    def descriptor(self, parent: TaskName, children: tuple[str, ...] = (), served: bool = False,
                   gone: bool = False) -> RelayDescriptor:
        """The descriptor of a receiver of it that fetches it from ``parent`` (a late one's
        if ``served``; one saying that nobody keeps it if ``gone``)."""
        return RelayDescriptor(self.tag, self.dtype, self.shape, str(parent), children, self.parts, self.late,
                               served, gone)


class RelaySender(RelayOffers):
    """The relay broadcasts one task sends."""

    def __init__(self, task: TaskName, incarnation: int, sends: Sends, transport: Transport,
                 loop: "EventLoopThread", peers: "Peers") -> None:
        super().__init__(task, incarnation, sends, transport)
        self._loop, self._peers = loop, peers
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        #: step -> the relays this task sends at it whose receivers did not all confirm
        self._sent: dict[int, list[_Sent]] = {}
        #: name -> the latest relay of it that serves late receivers (the oldest first)
        self._late: dict[str, _Sent] = {}

    def broadcast(self, name: str, array: np.ndarray, keys: Sequence[RendezvousKey], step: int,
                  fanout: int, late: bool = False) -> SendHandle:
        """Offer ``array`` as ``name`` to each receiver of ``keys`` by relay, ``fanout``
        children per receiver in their order (and to the tasks that ask for it later if
        ``late``); its handle completes per receiver as each confirms."""
        tag = f"{PREFIX}{self._incarnation:x}:{next(self._ids)}"
        receivers = [key.dst for key in keys]
        count = part_count(array.nbytes)
        sent = _Sent(tag, name, step, array, receivers,
                     [self._sends.open(describe_send(name, task, step)) for task in receivers],
                     dtype=dtype_enum(array.dtype), shape=tuple(array.shape), parts=count, late=late)
        plan = tree(len(receivers), fanout)
        try:
            for i, (parent, children) in enumerate(plan):
                descriptor = sent.descriptor(self._task if parent < 0 else receivers[parent],
                                             tuple(str(receivers[c]) for c in children))
                self.offer(step, receivers[i], name, descriptor.encode(), f"{name!r} (its relay)")
            for i, (parent, _) in enumerate(plan):
                if parent < 0:
                    self._offer_tensor(sent, receivers[i], array, sent.tickets[i])
        except TensorverbsError as exc:  # the step was aborted or cleaned up
            for ticket in sent.tickets:
                ticket.fail(int(exc.code), exc.message)
            raise
        with self._lock:
            self._sent.setdefault(step, []).append(sent)
        for i in range(len(receivers)):
            self._await_ack(sent, i, 0)
        if late:
            self._serve_late(sent)
        return SendHandle(*(ticket.completion for ticket in sent.tickets))

    def _offer_tensor(self, sent: _Sent, dst: TaskName, array: np.ndarray,
                      ticket: "_core.SendTicket | None" = None) -> None:
        """Offer ``array``, ``sent``'s tensor, to ``dst``, a receiver that fetches it from this
        task: whole (delivered, as any send, once it takes it), or each of its parts
        (settled by its confirmation)."""
        for name, view in pieces(sent.tag, array, sent.parts):
            self.offer(sent.step, dst, name, view, ticket=ticket if sent.parts == 1 else None)

    # -- late receivers --------------------------------------------------------------------------
    def _serve_late(self, sent: _Sent) -> None:
        """Serve the tasks that ask for ``sent`` at its step and are not its receivers,
        instead of an earlier late relay of its name."""
        closed: list[_Sent] = []
        with self._lock:
            for old in self._late.values():  # (the memory may have changed: replicas serve it)
                if old.own and old.array is not None and np.may_share_memory(old.array, sent.array):
                    old.own = False
            earlier = self._late.pop(sent.name, None)
            closed += [earlier] if earlier is not None else []
            self._late[sent.name] = sent
            while len(self._late) > MAX_LATE:
                closed.append(self._late.pop(next(iter(self._late))))
        for old in closed:
            self._close_late(old)
        self._rendezvous.watch(sent.step, sent.name, functools.partial(self._asked_late, sent))

    def _close_late(self, sent: _Sent) -> None:
        """``sent`` serves late receivers no more (its array goes once its receivers settled)."""
        self._rendezvous.unwatch(sent.step, sent.name)
        with self._lock:
            sent.late, acks = False, list(sent.late_acks)
            if sent.settled():
                sent.array = None
        for ack in acks:
            ack.cancel()

    def _asked_late(self, sent: _Sent, dst: TaskName) -> None:
        """``dst``'s recv of ``sent``'s name at its step waits here (on a protocol's thread):
        a task not among its receivers is served, once (its next recv of the name waits
        for the next relay of it: one name and step may be relayed round after round)."""
        if dst == self._task or dst in sent.receivers:
            return
        with self._lock:
            if not sent.late or dst in sent.joiners:
                return
            sent.joiners.add(dst)
        try:
            self._loop.submit(self._serve(sent, dst))
        except Exception as exc:  # (stopping)
            log.info("not serving %r to late receiver %s: %s", sent.name, dst, exc)

    async def _serve(self, sent: _Sent, dst: TaskName) -> None:
        """Offer late receiver ``dst`` a descriptor naming a replica that offered it the
        tensor, or this task (the tensor with it), or saying that nobody keeps it."""
        try:
            parent = await self._replica_for(sent, dst)
            with self._lock:
                if not sent.late:  # (closed meanwhile: its recv waits as for a tensor not sent)
                    return
                array = self._own_array(sent)
            # (served: it fetches at a step of its own from a replica, and keeps nothing)
            descriptor = sent.descriptor(parent or self._task, served=True, gone=parent is None and array is None)
            self.offer(sent.step, dst, sent.name, descriptor.encode())
            if descriptor.gone:
                log.info("%r of step %d is asked for by %s, but no receiver keeps it any more and this task's "
                         "tensor may have changed since: told so", sent.name, sent.step, dst)
                return
            if parent is None and array is not None:
                self._offer_tensor(sent, dst, array)
            self._await_late_ack(sent, dst, 0)
        except Exception as exc:  # (its step ended meanwhile; this task stops)
            log.info("serving %r of step %d to late receiver %s failed: %s", sent.name, sent.step, dst, exc)

    def _own_array(self, sent: _Sent) -> np.ndarray | None:
        """``sent``'s array if it is as sent (under the lock): no later late relay sent the
        same memory, or its own receivers did not all settle yet (it must not change until
        they did)."""
        return sent.array if sent.own or not sent.settled() else None

    async def _replica_for(self, sent: _Sent, dst: TaskName) -> TaskName | None:
        """A replica of ``sent`` that offered it to ``dst`` (the least used asked first;
        one that did not, asked no more), or None."""
        with self._lock:
            replicas = sorted(sent.have, key=lambda task: sent.have[task])
        for replica in replicas:
            with self._lock:  # (counted before asking: late receivers at once spread)
                sent.have[replica] = sent.have.get(replica, 0) + 1
            try:
                if await self._peers.serve_relayed(replica, sent.tag, dst, ASK_SECONDS):
                    return replica
                with self._lock:  # it keeps it no more: asked no more
                    sent.have.pop(replica, None)
            except Exception as exc:  # (gone, or too slow: the next, this time)
                log.info("%s did not serve %r to %s: %s", replica, sent.name, dst, exc)
                with self._lock:
                    if replica in sent.have:
                        sent.have[replica] -= 1
        return None

    def _await_late_ack(self, sent: _Sent, dst: TaskName, attempt: int) -> None:
        """Receive late receiver ``dst``'s ``attempt``-th confirmation: a replica once it
        has the tensor; sent it directly if its parent is gone."""
        key = RendezvousKey(dst, 0, self._task, ack_name(sent.tag, attempt))
        fut = self._rendezvous.recv_async(key, sent.step, None, own=True)
        with self._lock:
            sent.late_acks.append(fut)
        fut.add_done_callback(functools.partial(self._late_acked, sent, dst, attempt))

    def _late_acked(self, sent: _Sent, dst: TaskName, attempt: int, fut: concurrent.futures.Future) -> None:
        """Late receiver ``dst`` has the tensor (it is no replica: what it got is its own),
        or its replica is gone: sent it directly (a descriptor saying that nobody keeps it
        if this task's tensor may have changed)."""
        if fut.cancelled() or fut.exception() is not None:
            return
        if int(np.asarray(fut.result()).reshape(-1)[0]) != NEED_IT or attempt != 0:
            return
        with self._lock:
            array = self._own_array(sent)
        try:
            if array is None:
                self.offer(sent.step, dst, direct_name(sent.tag), sent.descriptor(self._task, gone=True).encode())
                return
            self.offer(sent.step, dst, direct_name(sent.tag), array)
        except TensorverbsError:
            return
        self._await_late_ack(sent, dst, 1)

    def _await_ack(self, sent: _Sent, i: int, attempt: int) -> None:
        """Receive receiver ``i``'s ``attempt``-th confirmation."""
        key = RendezvousKey(sent.receivers[i], 0, self._task, ack_name(sent.tag, attempt))
        fut = sent.acks[i] = self._rendezvous.recv_async(key, sent.step, None, own=True)
        fut.add_done_callback(lambda f: self._acked(sent, i, attempt, f))

    def _acked(self, sent: _Sent, i: int, attempt: int, fut: concurrent.futures.Future) -> None:
        """Receiver ``i`` confirmed (or is gone): settle its ticket, or offer it the
        tensor directly if its parent is gone."""
        ticket, receiver = sent.tickets[i], sent.receivers[i]
        if fut.cancelled():  # its step ended (drop_step settled the ticket)
            return
        error = fut.exception()
        what = int(np.asarray(fut.result()).reshape(-1)[0]) if error is None else None
        if what == HAVE_IT and sent.late:
            with self._lock:
                sent.have.setdefault(receiver, 0)
        if what == NEED_IT and attempt == 0:
            with self._lock:
                array = sent.array
            try:
                if array is None:  # (its step was cleaned up meanwhile)
                    raise AbortedError(f"step {sent.step} was cleaned up before {receiver} took {sent.name!r}")
                self.offer(sent.step, receiver, direct_name(sent.tag), array, ticket=ticket)
                self._await_ack(sent, i, 1)
                return
            except TensorverbsError as exc:
                error = exc
        if error is None:
            ticket.deliver()
        else:
            error = as_error(error, "its confirmation")
            ticket.fail(int(error.code), f"{receiver} did not confirm the relayed tensor: {error.message}")
        if sent.settled():
            with self._lock:
                if not sent.late:  # (else kept for late receivers)
                    sent.array = None
                at_step = self._sent.get(sent.step, [])
                if sent in at_step:
                    at_step.remove(sent)
                if not at_step:
                    self._sent.pop(sent.step, None)

    def holds(self) -> bool:
        """Whether a relay this task sent waits for a receiver, or serves late ones."""
        return bool(self._sent or self._late)

    def drop_step(self, step: int, error: TensorverbsError) -> None:
        """The relays sent at ``step`` fail (``error``: it was cleaned up or aborted) for
        each receiver that did not confirm yet."""
        with self._lock:
            sent = self._sent.pop(step, [])
            late = [relay for relay in self._late.values() if relay.step == step]
            for relay in late:
                del self._late[relay.name]
        for relay in late:
            self._close_late(relay)
        for relay in sent:
            for i, ticket in enumerate(relay.tickets):
                ticket.fail(int(error.code), error.message)
                relay.acks[i].cancel()
