"""The sender's side of a RecvTensor call (the "grpc" protocol) from its start until its
receiver confirms the tensor, and of a tensor whose confirmation the connection lost.

A tensor written whole may have reached its receiver, or not: once the call's connection
broke, only the receiver knows (a receiver that ends the call itself without confirming,
or dies, gets the tensor given back: see :meth:`Confirmations.refuse`). Such a tensor is held apart, neither delivered nor given
back to the table, until the receiver tells: ConfirmReceived (it arrived), a call made
again that names this one (it did not), or a call from another incarnation of the
receiver (the process that may have taken it is gone). Giving it back at once would
deliver it twice; delivering it would lose it. All methods run on the task's event loop.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Iterable

from ..rendezvous.key import RendezvousKey
from ..rendezvous.local import Value

#: gives a tensor back to the table: (step id, key, value, payload bytes)
GiveBack = Callable[[int, RendezvousKey, Value, int], None]


@dataclasses.dataclass
class _Call:
    """A RecvTensor call in progress."""

    incarnation: int       # of its receiver
    abandoned: bool = False  # a call made again named it: its tensor goes back when written
    confirmed: bool = False  # ConfirmReceived came before the call wrote its tensor whole


@dataclasses.dataclass
class _Written:
    """A tensor written whole, not confirmed."""

    step_id: int
    key: RendezvousKey
    value: Value
    nbytes: int
    incarnation: int  # of its receiver


class Confirmations:
    """The calls in progress, and the tensors written whole awaiting their receiver's word,
    per receiver (a task name) and request id (the receiver's choice)."""

    def __init__(self, give_back: GiveBack) -> None:
        self._give_back = give_back
        self._calls: dict[tuple[str, int], _Call] = {}
        self._written: dict[str, dict[int, _Written]] = {}

    def __len__(self) -> int:
        """How many tensors await their receiver's word."""
        return sum(len(of) for of in self._written.values())

    def running(self, receiver: str, request_id: int) -> bool:
        """Whether ``receiver``'s call ``request_id`` is in progress."""
        return (receiver, request_id) in self._calls

    def begin(self, receiver: str, request_id: int, incarnation: int, retry_of: Iterable[int]) -> None:
        """A call starts. Its receiver's tensors held for another incarnation go back, and so
        do those of the calls it is made again for (``retry_of``), now or once written."""
        held = self._written.get(receiver, {})
        for earlier_id in [i for i, w in held.items() if w.incarnation != incarnation]:
            self._back(receiver, earlier_id)
        for earlier_id in retry_of:
            earlier = self._calls.get((receiver, earlier_id))
            if earlier is not None:
                earlier.abandoned = True
            self._back(receiver, earlier_id)
        self._calls[(receiver, request_id)] = _Call(incarnation)

    def written(self, receiver: str, request_id: int, step_id: int, key: RendezvousKey, value: Value,
                nbytes: int) -> None:
        """The call wrote ``value`` whole: held until its receiver confirms it."""
        call = self._calls[(receiver, request_id)]
        if call.confirmed:
            value.delivered()
        elif call.abandoned:
            self._give_back(step_id, key, value, nbytes)
        else:
            self._written.setdefault(receiver, {})[request_id] = _Written(step_id, key, value, nbytes,
                                                                           call.incarnation)

    def end(self, receiver: str, request_id: int) -> None:
        """The call ended (however): a tensor it wrote whole stays held."""
        self._calls.pop((receiver, request_id), None)

    def confirm(self, receiver: str, request_id: int) -> None:
        """The receiver has the call's tensor (idempotent; an unknown call is ignored)."""
        written = self._pop(receiver, request_id)
        if written is not None:
            written.value.delivered()
            return
        call = self._calls.get((receiver, request_id))
        if call is not None:
            call.confirmed = True

    def refuse(self, receiver: str, request_id: int) -> None:
        """The receiver ended the call without confirming its tensor: it goes back."""
        self._back(receiver, request_id)

    def receivers_of(self, request_id: int) -> set[str]:
        """The receivers with a call ``request_id`` (for a server that takes the caller's word)."""
        return ({receiver for receiver, i in self._calls if i == request_id}
                | {receiver for receiver, of in self._written.items() if request_id in of})

    def _back(self, receiver: str, request_id: int) -> None:
        written = self._pop(receiver, request_id)
        if written is not None:
            self._give_back(written.step_id, written.key, written.value, written.nbytes)

    def _pop(self, receiver: str, request_id: int) -> _Written | None:
        of = self._written.get(receiver)
        if of is None:
            return None
        written = of.pop(request_id, None)
        if not of:
            del self._written[receiver]
        return written
