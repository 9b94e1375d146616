"""Batches of recvs and sends: many keys in one call, a result or an error per entry.

An entry names one tensor: :class:`RecvEntry` (name, source, step, ``out``) or
:class:`SendEntry` (name, value, destination, step); a plain tuple in the same order is
taken too. A batch of recvs waits until every entry has settled, then returns the
results in entry order. With ``return_exceptions`` an entry that failed holds its
TensorverbsError in its place; without it the first failed entry's error is raised, its
message naming every entry that failed, and its ``results`` attribute holds what every
entry ended with (the tensors that did arrive are not lost). A batch given up while
waiting (Ctrl-C, a signal handler's exception) gives back every tensor it had, each kept
for the next recv of it, as a single recv does.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, NamedTuple, Sequence, TypeVar

from . import arguments as check
from .errors import InvalidArgumentError, TensorverbsError, from_code
from .rendezvous.future import give_up_all, giving_up
from .rendezvous.key import RendezvousKey

if TYPE_CHECKING:
    from .rendezvous.key import TaskKeys

T = TypeVar("T")


class RecvEntry(NamedTuple):
    """One recv of a batch: tensor ``name`` from ``source`` at ``step_id``, into ``out``
    if given (see ``Server.recv_async``)."""

    name: str
    source: str
    step_id: int = 0
    out: Any = None


class SendEntry(NamedTuple):
    """One send of a batch: ``value`` as tensor ``name`` for task ``to`` at ``step_id``."""

    name: str
    value: Any
    to: str
    step_id: int = 0


def entries(items: Iterable[Any], kind: type[RecvEntry] | type[SendEntry]) -> list[Any]:
    """``items`` as entries of ``kind``; InvalidArgumentError naming the first that is not
    one (or a tuple that makes one)."""
    if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
        raise InvalidArgumentError(f"a batch is a sequence of {kind.__name__}s, not {type(items).__name__}")
    out = []
    for i, item in enumerate(items):
        if isinstance(item, kind):
            out.append(item)
            continue
        try:
            out.append(kind(*item))
        except TypeError:
            raise InvalidArgumentError(
                f"entry {i} of the batch is not a {kind.__name__} ({', '.join(kind._fields)}): {item!r}") from None
    return out


def describe(entry: RecvEntry) -> str:
    """The entry, for messages: "'w' from /job:ps/task:0 at step 3"."""
    return f"{entry.name!r} from {entry.source} at step {entry.step_id}"


def each(batch: Sequence[RecvEntry], fn: Callable[[RecvEntry], T]) -> list[T]:
    """``fn`` of each entry; a TensorverbsError it raises for one (a bad argument) is
    raised again naming the entry (the caller gives up what was started:
    :func:`~.rendezvous.future.giving_up`)."""
    made: list[T] = []
    for i, entry in enumerate(batch):
        try:
            made.append(fn(entry))
        except TensorverbsError as exc:
            raise from_code(int(exc.code), f"entry {i} ({describe(entry)}): {exc.message}") from None
    return made


def keys(batch: Sequence[RecvEntry], task_keys: "TaskKeys") -> tuple[list[RendezvousKey], list[int], int]:
    """The key and step of each entry's recv, and how many are local recvs; a bad argument
    raises its error naming the entry (see :func:`each`)."""
    keys, steps, local = [], [], 0
    for i, entry in enumerate(batch):
        try:
            key, here = task_keys.recv(entry.name, entry.source)
            steps.append(check.integer(entry.step_id, "step_id"))
        except TensorverbsError as exc:
            raise from_code(int(exc.code), f"entry {i} ({describe(entry)}): {exc.message}") from None
        keys.append(key)
        local += here
    return keys, steps, local


def start(batch: Sequence[RecvEntry], start_one: Callable[[RecvEntry], concurrent.futures.Future[Any]]
          ) -> list[concurrent.futures.Future[Any]]:
    """Each entry's recv started; if one cannot start (a bad argument), or a signal's
    exception interrupts the start (Ctrl-C), every recv started is given up and the
    error raised, a bad entry's naming it."""
    return giving_up(lambda: each(batch, start_one))


def run(batch: Sequence[RecvEntry], start_one: Callable[[RecvEntry], concurrent.futures.Future[Any]]
        ) -> Outcomes:
    """Start each entry's recv (see :func:`start`) and wait for them all; interrupted
    anywhere in between, every recv started is given up (each tensor kept for the next
    recv of it), also one whose future had not come back to the batch yet."""
    def start_and_wait() -> Outcomes:
        futures = each(batch, start_one)
        for fut in futures:
            fut.exception()  # waits (on the main thread in slices: signal handlers run)
        return _outcomes(batch, futures)
    return giving_up(start_and_wait)


@dataclass
class Outcomes:
    """What each entry of a batch ended with: its result or its error."""

    batch: Sequence[RecvEntry]
    results: list[Any]

    def settle(self, return_exceptions: bool) -> list[Any]:
        """The results; or, unless ``return_exceptions``, the first failed entry's error
        (naming all that failed, with ``results`` attached)."""
        failed = [i for i, r in enumerate(self.results) if isinstance(r, TensorverbsError)]
        if return_exceptions or not failed:
            return self.results
        first: TensorverbsError = self.results[failed[0]]
        others = f"; {len(failed)} of {len(self.batch)} entries failed: {', '.join(map(str, failed))}" \
            if len(failed) > 1 else ""
        error = from_code(int(first.code), f"entry {failed[0]} ({describe(self.batch[failed[0]])}): "
                                           f"{first.message}{others}")
        error.results = self.results  # type: ignore[attr-defined]
        raise error


async def await_all(batch: Sequence[RecvEntry], futures: Sequence[concurrent.futures.Future[Any]]) -> Outcomes:
    """Wait for every recv of ``batch`` in asyncio: the loop keeps running; a cancelled
    awaiting task gives every recv back."""
    try:
        if futures:
            await asyncio.wait([asyncio.wrap_future(fut) for fut in futures])
    except BaseException:
        give_up_all(futures)
        raise
    return _outcomes(batch, futures)


def _outcomes(batch: Sequence[RecvEntry], futures: Sequence[concurrent.futures.Future[Any]]) -> Outcomes:
    results = []
    for fut in futures:
        error = fut.exception(0)
        results.append(fut.result(0) if error is None else error)
    return Outcomes(batch, results)
