"""What the receivers of a relay broadcast that serves late receivers keep of it
(:class:`Replicas`): each tensor they got, with its descriptor, so that its sender can
have them offer it to a task that asks for it later (ServeRelayed) instead of sending it
again over its own link. Bounded: a receiver keeps the tensors of MAX_STEPS steps at
most (the oldest go first), none of a step it cleaned up, and none whose memory a later
relayed recv lands in."""
from __future__ import annotations

import collections
import threading
from dataclasses import dataclass

import numpy as np

from ..cluster import TaskName
from .relay_plan import RelayDescriptor

#: the most steps whose relayed tensors a receiver keeps for late receivers
MAX_STEPS = 2


@dataclass(frozen=True)
class Replica:
    """A relayed tensor kept: its relay's ``descriptor`` (as this receiver got it) from
    ``origin``, the step it came at, and its bytes (host memory)."""

    descriptor: RelayDescriptor
    origin: TaskName
    at: int
    array: np.ndarray


class Replicas:
    """The relayed tensors one receiver keeps for late receivers, by relay tag."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: dict[str, Replica] = {}
        self._steps: collections.OrderedDict[int, None] = collections.OrderedDict()  # (oldest first)

    def __bool__(self) -> bool:
        return bool(self._kept)

    def keep(self, replica: Replica) -> None:
        """Keep ``replica`` (the tensors of the oldest step go beyond MAX_STEPS)."""
        with self._lock:
            self._kept[replica.descriptor.tag] = replica
            self._steps[replica.at] = None
            while len(self._steps) > MAX_STEPS:
                self._drop(self._steps.popitem(last=False)[0])

    def get(self, tag: str, origin: str) -> Replica | None:
        """The tensor kept of relay ``tag``, if ``origin`` sent it."""
        with self._lock:
            replica = self._kept.get(tag)
        return replica if replica is not None and str(replica.origin) == origin else None

    def drop_step(self, at: int) -> None:
        """Forget the tensors that came at step ``at`` (cleaned up or aborted)."""
        with self._lock:
            if at in self._steps:
                del self._steps[at]
                self._drop(at)

    def drop_sharing(self, memory: np.ndarray) -> None:
        """Forget the tensors kept in ``memory``: a recv lands another there."""
        with self._lock:
            for tag in [tag for tag, r in self._kept.items() if np.may_share_memory(r.array, memory)]:
                del self._kept[tag]

    def _drop(self, at: int) -> None:
        for tag in [tag for tag, replica in self._kept.items() if replica.at == at]:
            del self._kept[tag]
