"""What the receivers of a relay broadcast that serves late receivers keep of it
(:class:`Replicas`): each tensor they got, with its descriptor, so that its sender can
have them offer it to a task that asks for it later (ServeRelayed) instead of sending it
again over its own link. Bounded: a receiver keeps the latest tensor of each name of each
sender (MAX_KEPT at most, the oldest going first), none of a step it cleaned up, and none
whose memory a later relayed recv lands in. A late receiver is offered a copy, made under
the lock that those drops take: it never sees the memory change under it."""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..cluster import TaskName
from .relay_plan import RelayDescriptor

#: the most tensors a receiver keeps for late receivers
MAX_KEPT = 1024


@dataclass(frozen=True)
class Replica:
    """A relayed tensor kept: tensor ``name`` of ``origin``'s relay (its ``descriptor``, as
    this receiver got it), the step it came at, and its bytes (host memory)."""

    descriptor: RelayDescriptor
    origin: TaskName
    name: str
    at: int
    array: np.ndarray


class Replicas:
    """The relayed tensors one receiver keeps for late receivers, by relay tag."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: dict[str, Replica] = {}  # (the oldest first)
        self._latest: dict[tuple[TaskName, str], str] = {}  # (origin, name) -> tag
        #: tag -> the bytes its tensor spans, [start, end) (drop_sharing compares them, on
        #: every relayed recv into an out: cheaper than np.may_share_memory)
        self._bounds: dict[str, tuple[int, int]] = {}

    def __len__(self) -> int:
        return len(self._kept)

    def keep(self, replica: Replica) -> None:
        """Keep ``replica``, instead of an earlier tensor of its name from its sender."""
        with self._lock:
            earlier = self._latest.get((replica.origin, replica.name))
            if earlier is not None:
                self._forget(earlier)
            self._kept[replica.descriptor.tag] = replica
            self._bounds[replica.descriptor.tag] = _span(replica.array)
            self._latest[(replica.origin, replica.name)] = replica.descriptor.tag
            while len(self._kept) > MAX_KEPT:
                self._forget(next(iter(self._kept)))

    def copy(self, tag: str, origin: str,
             allocate: Callable[[tuple[int, ...], np.dtype], np.ndarray]) -> tuple[Replica, np.ndarray] | None:
        """The tensor kept of relay ``tag``, if ``origin`` sent it, and a copy of its bytes
        (in ``allocate``'s memory)."""
        with self._lock:
            replica = self._kept.get(tag)
            if replica is None or str(replica.origin) != origin:
                return None
            copy = allocate(replica.array.shape, replica.array.dtype)
            copy[...] = replica.array
        return replica, copy

    def drop_step(self, at: int) -> None:
        """Forget the tensors that came at step ``at`` (cleaned up or aborted)."""
        with self._lock:
            for tag in [tag for tag, replica in self._kept.items() if replica.at == at]:
                self._forget(tag)

    def drop_sharing(self, memory: np.ndarray) -> None:
        """Forget the tensors kept in ``memory``: a recv lands another there."""
        start, end = _span(memory)
        with self._lock:
            for tag in [tag for tag, (low, high) in self._bounds.items() if low < end and high > start]:
                self._forget(tag)

    def _forget(self, tag: str) -> None:
        replica = self._kept.pop(tag)
        del self._bounds[tag]
        if self._latest.get((replica.origin, replica.name)) == tag:
            del self._latest[(replica.origin, replica.name)]


def _span(array: np.ndarray) -> tuple[int, int]:
    """The bytes a C-contiguous ``array`` spans, [start, end)."""
    start = array.__array_interface__["data"][0]
    return start, start + array.nbytes
