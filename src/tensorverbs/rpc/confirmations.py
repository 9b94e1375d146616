"""The sender's side of a RecvTensor call (the "grpc" protocol): the calls in progress,
and the tensors held for their receivers' word.

From its first byte on its way, a tensor may reach its receiver or not, and once the
call's connection broke only the receiver knows which. So the sender holds it, neither
delivered nor back in its table, until the receiver tells: taken (the confirmation in
the call, or SettleRecvTensors), dropped (SettleRecvTensors, or a call made again that
names the call in ``retry_of``), or a call from another incarnation of the receiver (the
process that may have read it is gone). How the call ended decides nothing: gRPC ends
a handler the same way whether its receiver went away on purpose or its connection
broke. Giving the tensor back on a guess would deliver it twice; delivering it would
lose it. All methods run on the task's event loop.
"""
from __future__ import annotations

import collections
import dataclasses
from typing import Callable, Iterable

from ..rendezvous.key import RendezvousKey
from ..rendezvous.local import Value

#: how many of a receiver's earlier incarnations are remembered (their late calls refused)
RETIRED_KEPT = 8
#: gives a tensor back to the table: (step id, key, value, payload bytes)
GiveBack = Callable[[int, RendezvousKey, Value, int], None]


@dataclasses.dataclass
class _Call:
    """A RecvTensor call in progress."""

    incarnation: int        # of its receiver
    dropped: bool = False   # its receiver's word came first: it ended without its tensor


@dataclasses.dataclass
class _Held:
    """A tensor on its way, or arrived, awaiting its receiver's word."""

    step_id: int
    key: RendezvousKey
    value: Value
    nbytes: int
    incarnation: int  # of its receiver


class Confirmations:
    """The calls in progress and the tensors held, per receiver (a task name) and request
    id (the receiver's choice)."""

    def __init__(self, give_back: GiveBack) -> None:
        self._give_back = give_back
        self._calls: dict[tuple[str, int], _Call] = {}
        self._held: dict[str, dict[int, _Held]] = {}
        # the latest incarnation of each receiver with calls in progress or tensors held,
        # and how many calls it has in progress
        self._incarnation: dict[str, int] = {}
        self._calls_of: dict[str, int] = {}
        self._retired: dict[str, list[int]] = {}  # its incarnations before (the latest RETIRED_KEPT)

    def __len__(self) -> int:
        """How many tensors await their receiver's word."""
        return sum(len(of) for of in self._held.values())

    def in_use(self, receiver: str, request_id: int) -> bool:
        """Whether ``receiver``'s request id names a call in progress or a tensor held."""
        return (receiver, request_id) in self._calls or request_id in self._held.get(receiver, {})

    def begin(self, receiver: str, request_id: int, incarnation: int, retry_of: Iterable[int]) -> bool:
        """A call starts. What is held for another incarnation of its receiver goes back,
        and so does what is held for the calls it is made again for (``retry_of``). False
        (the call is not begun) for a call of an incarnation that a later one replaced."""
        if incarnation in self._retired.get(receiver, ()):
            return False
        self._calls[(receiver, request_id)] = _Call(incarnation)
        self._calls_of[receiver] = self._calls_of.get(receiver, 0) + 1
        current = self._incarnation.get(receiver)
        if current != incarnation:
            if current is not None:
                retired = self._retired.setdefault(receiver, [])
                retired[:] = [*retired, current][-RETIRED_KEPT:]
            self._incarnation[receiver] = incarnation
            held = self._held.get(receiver, {})
            for earlier_id in [i for i, h in held.items() if h.incarnation != incarnation]:
                self._back(receiver, earlier_id)
        for earlier_id in retry_of:
            if earlier_id != request_id:
                self.drop(receiver, earlier_id)
        return True

    def hold(self, receiver: str, request_id: int, step_id: int, key: RendezvousKey, value: Value,
             nbytes: int) -> bool:
        """The call is about to write ``value``: held from now on. False (and not held)
        when its receiver has dropped the call, or restarted since it made it."""
        call = self._calls[(receiver, request_id)]
        if call.dropped or self._incarnation.get(receiver) != call.incarnation:
            return False
        self._held.setdefault(receiver, {})[request_id] = _Held(step_id, key, value, nbytes, call.incarnation)
        return True

    def end(self, receiver: str, request_id: int) -> None:
        """The call ended (however): what it holds stays held."""
        if self._calls.pop((receiver, request_id), None) is None:
            return
        left = self._calls_of[receiver] - 1
        if left:
            self._calls_of[receiver] = left
        else:
            del self._calls_of[receiver]
            self._forget(receiver)

    def confirm(self, receiver: str, request_id: int) -> None:
        """The receiver took the call's tensor (idempotent; an unknown call is ignored)."""
        held = self._pop(receiver, request_id)
        if held is not None:
            held.value.delivered()

    def drop(self, receiver: str, request_id: int) -> None:
        """The call ended without its tensor: what it holds goes back (idempotent)."""
        call = self._calls.get((receiver, request_id))
        if call is not None:
            call.dropped = True
        self._back(receiver, request_id)

    def receivers_of(self, request_ids: Iterable[int]) -> dict[int, set[str]]:
        """The receivers with a call of each of ``request_ids`` (for a server that takes the
        caller's word), in one pass over the calls and tensors held."""
        wanted, found = set(request_ids), collections.defaultdict(set)
        for receiver, request_id in self._calls:
            if request_id in wanted:
                found[request_id].add(receiver)
        for receiver, of in self._held.items():
            for request_id in wanted & of.keys():
                found[request_id].add(receiver)
        return found

    def _back(self, receiver: str, request_id: int) -> None:
        held = self._pop(receiver, request_id)
        if held is not None:
            self._give_back(held.step_id, held.key, held.value, held.nbytes)

    def _pop(self, receiver: str, request_id: int) -> _Held | None:
        of = self._held.get(receiver)
        if of is None:
            return None
        held = of.pop(request_id, None)
        if not of:
            del self._held[receiver]
            self._forget(receiver)
        return held

    def _forget(self, receiver: str) -> None:
        """Forget ``receiver``'s incarnation once it has no call and nothing held."""
        if receiver not in self._calls_of and receiver not in self._held:
            self._incarnation.pop(receiver, None)
            self._retired.pop(receiver, None)
