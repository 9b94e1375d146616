"""The recvs of watched names that wait in the core's table for a send nobody made (a
relay broadcast's late receivers): a thread of their own takes each from the core (the GIL
released while none comes) and tells the name's watcher which task asks."""
from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Callable

from ..cluster import TaskName
from ..native_waits import end_at_exit

if TYPE_CHECKING:
    from .. import _core
    from .task_ids import TaskIds

log = logging.getLogger(__name__)

#: told the task whose recv of a watched name waits
Watcher = Callable[[TaskName], None]


class UnmatchedRecvs:
    """The watched names of one task's core (``task_id`` in ``ids``) and their watchers."""

    def __init__(self, core: "_core.Rendezvous", ids: "TaskIds", task_id: int) -> None:
        self._core, self._ids, self._task_id = core, ids, task_id
        self._watchers: dict[tuple[int, str], Watcher] = {}
        self._follower: threading.Thread | None = None
        self._lock = threading.Lock()

    def watch(self, step_id: int, name: str, watcher: Watcher) -> None:
        """Tell ``watcher`` each task whose recv of ``name`` at ``step_id`` waits for a send
        of this task, now or later, until :meth:`unwatch`."""
        with self._lock:
            self._watchers[(step_id, name)] = watcher
            if self._follower is None:  # (started by the first watch: most tasks never watch)
                self._follower = threading.Thread(target=self._follow, name="tv-unmatched-recvs", daemon=True)
                self._follower.start()
                end_at_exit(self._follower, self._core.end_unmatched)
        self._core.watch(step_id, name)

    def unwatch(self, step_id: int, name: str) -> None:
        """Stop telling the recvs of ``name`` at ``step_id``."""
        self._core.unwatch(step_id, name)
        with self._lock:
            self._watchers.pop((step_id, name), None)

    def _follow(self) -> None:
        while (recv := self._core.next_unmatched(-1)) is not None:
            step_id, src, dst, name = recv
            watcher = self._watchers.get((step_id, name))
            if watcher is None or src != self._task_id:
                continue
            try:
                watcher(self._ids.task(dst))
            except Exception as exc:  # (a peer that left meanwhile: nobody to serve)
                log.info("a late receiver's recv of %r at step %d is not served: %s", name, step_id, exc)
