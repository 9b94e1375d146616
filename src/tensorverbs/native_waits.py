"""Python threads that wait in the native core with the GIL released, ended at interpreter
exit before it finalizes.

A daemon thread that comes back from the core while the interpreter finalizes is ended by
CPython (3.11: pthread_exit while it waits for the GIL), and that unwinding through the
binding's C++ frames aborts the whole process. So each such thread registers how to wake
and join it; at exit (an atexit handler: the interpreter is whole, the GIL is given up
while joining) every one still running is ended.
"""
from __future__ import annotations

import atexit
import threading
import weakref
from typing import Callable

#: how long exit waits for one thread to end (seconds)
JOIN_SECONDS = 5.0

_waiting: "weakref.WeakKeyDictionary[threading.Thread, Callable[[], None]]" = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def end_at_exit(thread: threading.Thread, wake: Callable[[], None]) -> None:
    """At exit, call ``wake`` (it makes ``thread``'s native wait return and the thread end)
    and join ``thread``."""
    with _lock:
        _waiting[thread] = wake


def _end_all() -> None:
    with _lock:
        waiting = list(_waiting.items())
        _waiting.clear()
    for thread, wake in waiting:
        if thread.is_alive():
            wake()
    for thread, _ in waiting:
        thread.join(JOIN_SECONDS)


atexit.register(_end_all)
