"""Closing in order: what was made on an object closes before the object.

pyverbs destroys the children of a closed context or PD itself, underneath their
tensorverbs wrappers, whose next call would then use a freed pointer and crash the
process. So a wrapper closes the wrappers made on it first (newest first), and they
know they are closed.
"""
from __future__ import annotations

import itertools
import threading
import weakref

from ...errors import FailedPreconditionError


class Owner:
    """Mixin: :meth:`own` what is made on this object; :meth:`close_owned` in ``_close``."""

    def _init_owner(self) -> None:
        # entries vanish with their objects, so a long-lived owner does not grow
        self._owned: weakref.WeakValueDictionary[int, object] = weakref.WeakValueDictionary()
        self._serial = itertools.count()
        self._owned_lock = threading.Lock()

    def own(self, obj):
        with self._owned_lock:
            self._owned[next(self._serial)] = obj
        return obj

    def close_owned(self) -> None:
        with self._owned_lock:
            objs = [self._owned.get(k) for k in sorted(self._owned.keys(), reverse=True)]
            self._owned.clear()
        for obj in objs:
            if obj is not None:
                obj.close()


def check_open(obj) -> None:
    """FailedPreconditionError for a call on a closed object (pyverbs would crash on it)."""
    if obj.closed:
        raise FailedPreconditionError(f"{type(obj).__name__.removeprefix('Ibverbs')} is closed")
