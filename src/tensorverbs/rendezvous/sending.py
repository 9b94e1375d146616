"""Sending: what a task's send does below the public call, for every protocol.

A send gets its key and a completion ticket; its tensor is offered by handle (a tensor of
a device, to a task of this host that sees the device) or as host bytes. A broadcast
offers one tensor to several receivers, the protocol registering its bytes once for all.
A send the table refuses fails its ticket at once, so that ``flush`` never waits for it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from .. import arguments as check
from ..cluster import TaskName
from ..devices import HOST, Device, device_of, host_array
from ..errors import InvalidArgumentError, TensorverbsError
from ..tensor import prepare
from ..tensor_list import Packed, TensorList
from .blocks import Blocks
from .completion import SendHandle, Sends, describe_send
from .key import RendezvousKey, TaskKeys
from .local import Value
from .relay_plan import MAX_FANOUT

if TYPE_CHECKING:
    from .. import _core
    from ..runtime import TaskRuntime
    from .remote import RemoteRendezvous


class Sending:
    """The sends of one task, into ``rendezvous``; their tickets from ``sends``."""

    def __init__(self, keys: TaskKeys, sends: Sends, runtime: "TaskRuntime",
                 rendezvous: "RemoteRendezvous") -> None:
        self._keys, self._sends, self._rt, self._rendezvous = keys, sends, runtime, rendezvous

    def send(self, name: str, value: Any, to: str | Sequence[str], step_id: int,
             is_dead: bool) -> SendHandle:
        """Offer ``value`` as ``name`` to ``to`` (a task, or a list of them) at ``step_id``."""
        if is_dead is False and (offer := self._host_offer(name, value, to, step_id)) is not None:
            step, key, host = offer  # (most sends: a host tensor to one task)
            ticket = host.ticket  # (a local recv that takes the value at once takes its ticket)
            with _failing([ticket]):
                self._rendezvous.send(step, key, host)
            self._rt.counters.add("sends")
            return SendHandle(ticket.completion)
        if isinstance(value, TensorList):  # moved as one tensor
            value = value.pack()
        if not isinstance(to, (str, TaskName)):
            return self._broadcast(name, value, to, step_id, is_dead)
        key = self._keys.send(name, to)
        step, device = check.integer(step_id, "step_id"), device_of(value)
        is_dead = check.flag(is_dead, "is_dead")
        ticket = self._open(key, step)
        with _failing([ticket]):
            self._offer(step, key, value, device, is_dead, ticket)
        self._rt.counters.add("sends")
        return SendHandle(ticket.completion)

    def send_many(self, batch: Sequence[Any]) -> list[SendHandle]:
        """Offer each entry (name, value, to, step_id) in order, as :meth:`send`; their
        handles. An entry that cannot be offered raises :class:`EntryFailed` (its index and
        error), the entries before it offered. A run of host tensors each for one task goes
        to the protocol in one call."""
        handles: list[SendHandle] = []
        run: list[tuple[int, RendezvousKey, Value]] = []
        for i, entry in enumerate(batch):
            try:
                offer = self._host_offer(entry.name, entry.value, entry.to, entry.step_id)
                if offer is None:  # by handle, a TensorList or a broadcast: its own send
                    self._offer_run(run, i)
                    handles.append(self.send(entry.name, entry.value, entry.to, entry.step_id, False))
                else:
                    run.append(offer)
                    handles.append(SendHandle(offer[2].ticket.completion))
            except TensorverbsError as exc:
                self._offer_run(run, i)  # the entries before it
                raise EntryFailed(i, exc) from None
        self._offer_run(run, len(batch))
        return handles

    def _host_offer(self, name: str, value: Any, to: Any, step_id: int) -> tuple[int, RendezvousKey, Value] | None:
        """(step, key, value with its ticket) of a send of a host tensor to one task,
        which its protocol can offer with others; None for any other send."""
        if not isinstance(to, (str, TaskName)):
            return None
        if type(value) is not np.ndarray:  # (a numpy array is on the host, as it is)
            if isinstance(value, TensorList) or (device := device_of(value)) is not HOST:
                return None
            value = host_array(value, device)[0]
        key = self._keys.send(name, str(to))
        step = check.integer(step_id, "step_id")
        return step, key, Value(_prepared(value), False, self._open(key, step))

    def _offer_run(self, run: list[tuple[int, RendezvousKey, Value]], end: int) -> None:
        """Offer ``run``, the entries before index ``end``, and empty it; the tickets of the
        entries not offered fail with the error, raised as :class:`EntryFailed`."""
        if not run:
            return
        offers = list(run)
        run.clear()
        failed = self._rendezvous.send_many(offers)
        offered = len(offers) if failed is None else failed[0]
        self._rt.counters.add("sends", offered)
        if failed is not None:
            for _, _, value in offers[offered:]:
                value.ticket.fail(int(failed[1].code), failed[1].message)
            raise EntryFailed(end - len(offers) + offered, failed[1])

    def send_blocks(self, blocks: Blocks, to: str, step_id: int) -> SendHandle:
        """Offer ``blocks`` to task ``to`` at ``step_id`` (``Server.send_blocks``): one
        handle, done once the receiver has every block. A block that cannot be offered
        raises :class:`EntryFailed`, the blocks before it offered."""
        key = self._keys.send(blocks.name, str(to))
        step = check.integer(step_id, "step_id")
        n = len(blocks)
        ticket = self._sends.open(describe_send(blocks.names(), key.dst, step), max(n, 1))
        if not n:
            ticket.deliver()  # nothing to send
            return SendHandle(ticket.completion)
        failed = self._rendezvous.send_blocks(step, key, blocks, ticket)
        self._rt.counters.add("sends", n if failed is None else failed[0])
        if failed is not None:
            raise EntryFailed(*failed)
        return SendHandle(ticket.completion)

    def relay(self, name: str, value: Any, to: str | Sequence[str], step_id: int, is_dead: bool,
              relay: bool | int, late: bool = False) -> SendHandle:
        """:meth:`send` by relay (``relay``: True, a chain, or children per receiver; served
        to late receivers if ``late``); a send to one task, a dead tensor, a tensor of
        strings, a TensorList or one passed by handle is sent as without it (``late``
        refused for all but the first)."""
        fanout = 1 if relay is True else check.integer(relay, "relay", 1)
        if fanout > MAX_FANOUT:
            raise InvalidArgumentError(f"relay is {fanout}: a receiver passes a tensor on to at most {MAX_FANOUT}")
        if not isinstance(late, bool):
            raise InvalidArgumentError(f"late is {late!r}: True or False")
        if late and (is_dead is not False or isinstance(value, TensorList)):
            raise InvalidArgumentError("late receivers are served a tensor of a relay: not a dead tensor nor a "
                                       "TensorList")
        if isinstance(to, (str, TaskName)) and late:
            to = [to]
        if isinstance(to, (str, TaskName)) or is_dead is not False or isinstance(value, TensorList):
            return self.send(name, value, to, step_id, is_dead)
        keys, step = self._receivers(name, to), check.integer(step_id, "step_id")
        if any(key.dst == self._rt.task for key in keys):
            raise InvalidArgumentError(f"to lists {self._rt.task}, the sending task: a relay goes to other tasks")
        array = _prepared(host_array(value, device_of(value))[0])
        if array.dtype.kind == "O":  # strings: a receiver's landing cannot hold them before they came
            if late:
                raise InvalidArgumentError("late receivers are served a relay of a tensor of numbers, not strings")
            return self.send(name, array, to, step_id, is_dead)
        handle = self._rt.relays.broadcast(name, array, keys, step, fanout, late)
        self._rt.counters.add("sends", len(keys))
        return handle

    def _receivers(self, name: str, to: Sequence[str]) -> list[RendezvousKey]:
        """The keys of a broadcast of ``name`` to each of ``to``, which lists each task once."""
        keys = [self._keys.send(name, task) for task in check.sequence(to, "to", "a task or a list of tasks")]
        if not keys:
            raise InvalidArgumentError("to lists no task to send to")
        seen: set[TaskName] = set()
        for key in keys:
            if key.dst in seen:
                raise InvalidArgumentError(f"to lists {key.dst} twice")
            seen.add(key.dst)
        return keys

    def _broadcast(self, name: str, value: Any, to: Sequence[str], step_id: int,
                   is_dead: bool) -> SendHandle:
        keys = self._receivers(name, to)
        step, device = check.integer(step_id, "step_id"), device_of(value)
        if check.flag(is_dead, "is_dead") or device is not HOST:  # a send each (by handle on a device)
            handles = [self.send(name, value, str(key.dst), step, is_dead) for key in keys]
            return SendHandle(*(c for handle in handles for c in handle.completions))
        array = _prepared(host_array(value, device)[0])
        tickets = [self._open(key, step) for key in keys]
        self._rendezvous.broadcast(step, keys, Value(array), tickets)  # fails the tickets it did not send
        self._rt.counters.add("sends", len(keys))
        return SendHandle(*(ticket.completion for ticket in tickets))

    def _open(self, key: RendezvousKey, step: int) -> "_core.SendTicket":
        return self._sends.open(describe_send(key.name, key.dst, step))

    def _offer(self, step: int, key: RendezvousKey, value: Any, device: Device, is_dead: bool,
               ticket: "_core.SendTicket") -> None:
        """Put ``value`` (on ``device``) in the table for ``key``'s receiver."""
        shared = self._rt.shared.offer(step, key, value, device, ticket) if not is_dead else None
        if shared is not None:  # passed by handle to a task of this host
            try:
                self._rendezvous.send(step, key, shared)
            except Exception:  # not sent (a signal's exception may come after it was sent:
                # the export is then left to its receiver, or to the end of its step)
                self._rt.shared.withdraw(shared)
                raise
        else:
            array, copied = host_array(value, device)
            if copied:
                self._rt.counters.add("proxy_copies")
            self._rendezvous.send(step, key, Value(_prepared(array), is_dead, ticket))


class EntryFailed(Exception):
    """Entry ``index`` of a batch of sends could not be offered: ``error`` says why."""

    def __init__(self, index: int, error: TensorverbsError) -> None:
        super().__init__(index, error)
        self.index, self.error = index, error


def _prepared(array: Any) -> Any:
    """The array a send offers: a packed TensorList as it is, anything else prepared."""
    return array if isinstance(array, Packed) else prepare(array)


class _failing:
    """A TensorverbsError raised within fails each of ``tickets`` not settled yet, now (not
    when the ticket is freed, which the error's traceback may put off). A class, not a
    generator: it is entered once per send."""

    __slots__ = ("tickets",)

    def __init__(self, tickets: Sequence["_core.SendTicket"]) -> None:
        self.tickets = tickets

    def __enter__(self) -> None:
        pass

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, trace: Any) -> None:
        if isinstance(exc, TensorverbsError):
            for ticket in self.tickets:
                ticket.fail(int(exc.code), exc.message)
