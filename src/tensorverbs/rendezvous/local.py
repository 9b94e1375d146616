"""The local rendezvous table: tag matching of sends and recvs, scoped by step.

A send puts its value in the table unless a recv already waits for it; a recv takes the
value if it is there and waits otherwise. Matching is first-in first-out per key, and
every step has its own table, so two steps using the same tensor name never mix.
Aborting a step fails its waiting recvs and every later send or recv of it until the
step is cleaned up; the sends a step drops (aborted or cleaned up) fail their
completion. A step's state is dropped as soon as it holds nothing (no tensor, no recv,
no abort), so a job that never calls ``cleanup_step`` keeps state only for tensors
nobody received yet and for aborted steps (both counted by :meth:`pending` and
:meth:`steps`). Callbacks run outside the lock, in the thread of whoever completed the
match (the sender for a recv that waited, the receiver otherwise). A recv of a watched
name that waits (:meth:`LocalTable.watch`: a relay broadcast's late receiver) is told to
its watcher.
"""
from __future__ import annotations

import collections
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable

from ..errors import AbortedError, TensorverbsError
from ..cluster import TaskName
from .key import RendezvousKey


@dataclass(slots=True)
class Value:
    """What a send puts in the table."""

    array: Any
    is_dead: bool = False
    #: the send's completion ticket (``_core.SendTicket``): told when the receiver has it
    ticket: Any = None
    #: when the table took it (its count of sends): a cleanup of its step after that drops it
    sent: int = 0

    def delivered(self) -> None:
        """The receiver has the tensor: the send is complete (once: the ticket goes with it,
        so that the value given back and delivered again does not count twice, as one part
        of a batch's ticket)."""
        ticket, self.ticket = self.ticket, None
        if ticket is not None:
            ticket.deliver()


#: how many steps' cleanups the table remembers (for the values given back after one)
CLEANUPS_KEPT = 4096


def _cleaned_up(step_id: int) -> AbortedError:
    return AbortedError(f"step {step_id} was cleaned up before its receiver took it")


def _fail_sends(items: dict[Hashable, collections.deque[Value]], error: TensorverbsError) -> None:
    """Fail the sends of values the table drops."""
    for queue in items.values():
        for value in queue:
            if value.ticket is not None:
                value.ticket.fail(int(error.code), error.message)


#: called once with (error, None) or (None, value)
Callback = Callable[[TensorverbsError | None, Value | None], None]


@dataclass
class _Step:
    items: dict[Hashable, collections.deque[Value]] = field(default_factory=dict)
    waiters: dict[Hashable, collections.deque["Waiter"]] = field(default_factory=dict)
    aborted: TensorverbsError | None = None


def _pop(queues: dict[Hashable, collections.deque], match: Hashable):
    """The oldest entry queued under ``match`` (dropping an emptied queue), or None."""
    queue = queues.get(match)
    if not queue:
        return None
    entry = queue.popleft()
    if not queue:
        del queues[match]
    return entry


class Waiter:
    """A recv waiting in the table; :meth:`cancel` withdraws it if it has not fired."""

    __slots__ = ("_table", "_step_id", "_match", "callback")

    def __init__(self, table: "LocalTable", step_id: int, match: Hashable, callback: Callback):
        self._table, self._step_id, self._match, self.callback = table, step_id, match, callback

    def cancel(self) -> bool:
        """Remove the waiter; False if it already fired."""
        return self._table._withdraw(self)


class LocalTable:
    """Sends of this task, matched with recvs (local ones and remote requests)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._steps: dict[int, _Step] = {}
        self._sends = 0  # values offered so far
        # step -> the count of sends at its last cleanup (the latest CLEANUPS_KEPT): a value
        # sent before, given back after, is dropped with the step
        self._cleaned: collections.OrderedDict[int, int] = collections.OrderedDict()
        #: (step, name) -> told the destination of each recv of it that waits (:meth:`watch`)
        self._watched: dict[tuple[int, str], Callable[[TaskName], None]] = {}

    def _step(self, step_id: int) -> _Step:
        step = self._steps.get(step_id)
        if step is None:
            step = self._steps[step_id] = _Step()
        return step

    def _prune(self, step_id: int, step: _Step) -> None:
        """Forget ``step`` if it holds nothing (under the lock)."""
        if not step.items and not step.waiters and step.aborted is None:
            self._steps.pop(step_id, None)

    def send(self, step_id: int, key: RendezvousKey, value: Value) -> None:
        """Offer ``value``; raises AbortedError if the step is aborted."""
        self._offer(step_id, key, value, first=False)

    def requeue(self, step_id: int, key: RendezvousKey, value: Value) -> None:
        """Give back a value a recv took but could not deliver (its requester went away):
        it is matched again before any later send of the same key. Dropped if its step
        was aborted or cleaned up meanwhile (its send fails with the step's error)."""
        with self._lock:
            cleaned = value.sent <= self._cleaned.get(step_id, 0)
        if cleaned:
            _fail_sends({key.matching: collections.deque([value])}, _cleaned_up(step_id))
            return
        try:
            self._offer(step_id, key, value, first=True)
        except TensorverbsError as error:
            _fail_sends({key.matching: collections.deque([value])}, error)

    def _offer(self, step_id: int, key: RendezvousKey, value: Value, first: bool) -> None:
        match = key.matching
        with self._lock:
            if not first:  # (a value given back keeps its count)
                self._sends += 1
                value.sent = self._sends
            step = self._step(step_id)
            if step.aborted is not None:
                raise type(step.aborted)(step.aborted.message)
            waiter = _pop(step.waiters, match)
            if waiter is None:
                items = step.items.setdefault(match, collections.deque())
                items.appendleft(value) if first else items.append(value)
                return
            self._prune(step_id, step)
        waiter.callback(None, value)

    def recv_async(self, step_id: int, key: RendezvousKey, callback: Callback) -> Waiter | None:
        """Match a recv: ``callback`` runs now if the value (or the step's abort) is there,
        else when it arrives. Returns the waiter, or None if the callback already ran."""
        match = key.matching
        with self._lock:
            step = self._step(step_id)
            error, value = step.aborted, None
            if error is None:
                value = _pop(step.items, match)
                if value is None:
                    waiter = Waiter(self, step_id, match, callback)
                    step.waiters.setdefault(match, collections.deque()).append(waiter)
                    watcher = self._watched.get((step_id, key.name)) if self._watched else None
                else:
                    self._prune(step_id, step)
        if value is None and error is None:
            if watcher is not None:  # a recv of a watched name waits
                watcher(key.dst)
            return waiter
        callback(error, value)
        return None

    def watch(self, step_id: int, name: str, watcher: Callable[[TaskName], None]) -> None:
        """Call ``watcher(dst)`` for each recv of ``name`` at ``step_id`` that waits, now
        or later, until :meth:`unwatch` (a relay broadcast's late receivers)."""
        with self._lock:
            self._watched[(step_id, name)] = watcher
            step = self._steps.get(step_id)
            matches: list[Any] = list(step.waiters) if step else []  # (src, dst, name, frame, iter)
            waiting = [match[1] for match in matches if match[2] == name for _ in step.waiters[match]]
        for dst in waiting:
            watcher(dst)

    def unwatch(self, step_id: int, name: str) -> None:
        """Stop calling the watcher of ``name`` at ``step_id``."""
        with self._lock:
            self._watched.pop((step_id, name), None)

    def _withdraw(self, waiter: Waiter) -> bool:
        with self._lock:
            step = self._steps.get(waiter._step_id)
            queue = step.waiters.get(waiter._match) if step else None
            if not queue or waiter not in queue:
                return False
            queue.remove(waiter)
            if not queue:
                del step.waiters[waiter._match]
            self._prune(waiter._step_id, step)
            return True

    def abort_step(self, step_id: int, error: TensorverbsError) -> None:
        """Fail the step's waiting recvs with ``error`` and refuse its later sends/recvs."""
        with self._lock:
            step = self._step(step_id)
            step.aborted = error
            dropped, step.items = step.items, {}
            waiters = [w for queue in step.waiters.values() for w in queue]
            step.waiters.clear()
        _fail_sends(dropped, error)
        for waiter in waiters:
            waiter.callback(type(error)(error.message), None)

    def aborted(self, step_id: int) -> TensorverbsError | None:
        """The error a step was aborted with, or None."""
        with self._lock:
            step = self._steps.get(step_id)
            error = step.aborted if step else None
        return type(error)(error.message) if error is not None else None

    def cleanup_step(self, step_id: int) -> None:
        """Forget the step; its waiting recvs fail with AbortedError."""
        with self._lock:
            step = self._steps.pop(step_id, None)
            self._cleaned[step_id] = self._sends
            self._cleaned.move_to_end(step_id)
            if len(self._cleaned) > CLEANUPS_KEPT:
                self._cleaned.popitem(last=False)
        if step is not None:
            _fail_sends(step.items, _cleaned_up(step_id))
            for queue in step.waiters.values():
                for waiter in queue:
                    waiter.callback(AbortedError(f"step {step_id} was cleaned up"), None)

    def steps(self) -> int:
        """Steps the table holds state for (tensors, recvs or an abort)."""
        with self._lock:
            return len(self._steps)

    def pending(self) -> tuple[int, int]:
        """(values waiting for a recv, recvs waiting for a value)."""
        with self._lock:
            items = sum(len(q) for s in self._steps.values() for q in s.items.values())
            waiters = sum(len(q) for s in self._steps.values() for q in s.waiters.values())
        return items, waiters
