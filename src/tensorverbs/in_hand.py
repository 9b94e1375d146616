"""The received tensors in the hands of a thread that makes a blocking recv's result: given
back to the protocol (each to the next recv of its key and step) when the public call is
interrupted by a signal handler's exception (Ctrl-C) before its caller has them.

The protocol's native core puts its answers in :data:`IN_HAND` itself, before it returns
them (CPython runs a signal's handler as a call of native code returns: a store after the
call would come too late), and the protocol puts there the future of a recv it starts,
before the recv can go out (a function's start is where a handler may run); the public
call's wrapper (:func:`tensorverbs.errors.public`) empties the hand as it returns or fails
(a TensorverbsError, which holds or replaces them), and gives them back as an exception of
the caller's code (a signal handler's) ends it. A leaf module: the wrapper is below every
other."""
from __future__ import annotations

import threading
from typing import Any


class _Hand(threading.local):
    #: (core, steps, sources, names, answers) of the answers in hand, or (core, step,
    #: source, name, answer) of one recv's: the core's give_back(step, src, name, dtype,
    #: shape, is_dead, payload) takes each answer back
    held: tuple[Any, Any, Any, Any, Any] | None = None
    #: the future of the recv the public call started last (a recv_async's), or the list of
    #: a batch's, before its caller has them: cancelled, or (settled) their tensors given back
    started: Any = None


IN_HAND = _Hand()


def give_up_started() -> None:
    """Give up the recvs this thread's public call started, before its caller has them: a
    pending one is cancelled, a settled one's tensor kept for the next recv of it."""
    started, IN_HAND.started = IN_HAND.started, None
    if started is None:
        return
    for fut in started if isinstance(started, list) else [started]:
        if not fut.cancel():
            fut.give_back()


def give_back() -> None:
    """Give this thread's answers in hand back to their core (those that carry a tensor),
    and the recvs it started up; empty the hand."""
    give_up_started()
    held, IN_HAND.held = IN_HAND.held, None
    if held is None:
        return
    core, steps, srcs, names, answers = held
    if isinstance(steps, int):  # one recv's
        steps, srcs, names, answers = (steps,), (srcs,), (names,), (answers,)
    try:
        for step, src, name, (code, _, dtype, shape, is_dead, payload) in zip(steps, srcs, names, answers):
            if not code:
                core.give_back(step, src, name, dtype, shape, is_dead, payload)
    except Exception:  # (the server stopped: nobody asks for them; and why the call ended stands)
        pass
