"""Lanes: where the work on recvs from one peer runs that must not run where their
answers arrive (the event loop, the native core's settler thread): copies of received
tensors to their devices, and the callers' done-callbacks.

Each peer has a lane of its own, one thread running its work in order, so a slow copy
or a callback that blocks holds up the recvs from that peer only, never the event loop
or the recvs from other peers. A lane's thread starts on its first work and stays
(idle, blocked) until the lanes close.
"""
from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

log = logging.getLogger(__name__)


def _run(fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    try:
        fn(*args)
    except BaseException:  # a caller's callback: logged, as concurrent.futures does
        log.exception("%r raised", fn)


class Lanes:
    """One lane per peer of a task, its threads named ``{name}-{peer}``."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._lanes: dict[str, ThreadPoolExecutor] = {}
        self._lock = threading.Lock()
        self._closed = False

    def run(self, peer: str, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on ``peer``'s lane after the work queued there already (in
        this thread once the lanes are closed); what it raises is logged."""
        with self._lock:
            lane = self._lanes.get(peer)
            if lane is None and not self._closed:
                lane = self._lanes[peer] = ThreadPoolExecutor(1, f"{self._name}-{peer}")
        try:
            if lane is not None:
                lane.submit(_run, fn, args)
                return
        except RuntimeError:  # closed meanwhile
            pass
        _run(fn, args)

    def close(self) -> None:
        """Let each lane finish its queued work and end (without waiting for it); later
        work runs in the thread that hands it over."""
        with self._lock:
            self._closed = True
            lanes, self._lanes = list(self._lanes.values()), {}
        for lane in lanes:
            lane.shutdown(wait=False)
