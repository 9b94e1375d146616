"""Interrupting Python code at each point where a signal's handler may run: a
KeyboardInterrupt raised as the ``k``-th traced call or return of a function of the chosen
modules happens. (CPython runs a signal's handler in the main thread as a function begins,
after a call returns and at the end of a loop's turn: a signal that comes at the wrong
moment raises there. A function's call and return are where these points are seen from
Python.)"""
from __future__ import annotations

import sys
from typing import Any, Callable


class Interrupted(KeyboardInterrupt):
    """The KeyboardInterrupt raised at a point (told apart from a real one)."""


def interrupt_at(k: int, fn: Callable[[], Any], files: tuple[str, ...]) -> str | None:
    """Call ``fn`` on this thread with an :class:`Interrupted` raised as the ``k``-th
    (from 1) call or return of a function in a module whose file name ends with one of ``files``;
    where it was raised ("call of wait at future.py:63"; ``fn``'s raising it is
    swallowed), or None if ``fn`` ran fewer events than ``k`` (every point was tried)."""
    seen = 0
    raised: str | None = None

    def trace(frame: Any, event: str, arg: Any) -> Any:
        nonlocal seen, raised
        if raised is not None or not frame.f_code.co_filename.endswith(files):
            return None if raised is not None else trace
        if event in ("call", "return"):
            seen += 1
            if seen == k:
                code = frame.f_code
                raised = f"{event} of {code.co_name} at {code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno}"
                sys.settrace(None)
                raise Interrupted(raised)
        return trace

    sys.settrace(trace)
    try:
        fn()
    except Interrupted:
        pass
    finally:
        sys.settrace(None)
    return raised
