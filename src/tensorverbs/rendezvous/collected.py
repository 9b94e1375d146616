"""Give-backs of the recv futures that the cyclic garbage collector frees, made on a thread
of their own rather than inside the collection. A collection runs in whichever thread
allocates when one is due, and that thread may hold a lock the give-back takes (a relay's,
the local table's): made there, the give-back would deadlock. A future freed as its last
reference goes (no collection) gives its tensor back at once, as before."""
from __future__ import annotations

import gc
import logging
import os
import queue
import threading
from typing import Any, Callable

log = logging.getLogger(__name__)

#: the thread collecting now, if any (collections do not overlap)
_collector: int | None = None
#: the give-backs put off; SimpleQueue.put is safe in a finalizer (reentrant)
_later: "queue.SimpleQueue[tuple[Callable[..., object], tuple[Any, ...]]]" = queue.SimpleQueue()
_started = False
_start_lock = threading.Lock()


def _phase(phase: str, info: dict[str, Any]) -> None:
    global _collector
    _collector = threading.get_ident() if phase == "start" else None


gc.callbacks.append(_phase)


def collecting() -> bool:
    """Whether this thread is inside a collection of the cyclic garbage collector."""
    return _collector == threading.get_ident()


def later(give_back: Callable[..., object], *args: Any) -> None:
    """Make ``give_back(*args)`` on the give-backs' thread (see :func:`start`)."""
    _later.put((give_back, args))


def start() -> None:
    """Start the thread that makes the give-backs put off (once a process; from a thread
    outside a collection: a server's start)."""
    global _started
    with _start_lock:
        if not _started:
            threading.Thread(target=_run, name="tensorverbs-give-backs", daemon=True).start()
            _started = True


def _run() -> None:
    while True:
        give_back, args = _later.get()
        try:
            give_back(*args)
        except Exception:  # (as the interpreter finalizes, the rendezvous may be gone)
            log.debug("a collected recv future could not give its tensor back", exc_info=True)


def _forked() -> None:
    global _started, _start_lock
    _started, _start_lock = False, threading.Lock()  # (the thread stayed in the parent)


os.register_at_fork(after_in_child=_forked)
