"""The received tensors in the hands of a thread that makes a blocking recv's result: given
back to the protocol (each to the next recv of its key and step) when the public call is
interrupted by a signal handler's exception (Ctrl-C) before its caller has them.

The protocol's native core puts its answers in :data:`IN_HAND` itself, before it returns
them (CPython runs a signal's handler as a call of native code returns: a store after the
call would come too late), and the protocol puts there the future of a recv it starts,
before the recv can go out (a function's start is where a handler may run); the public
call's wrapper (:func:`tensorverbs.errors.public`) empties the hand as it returns or fails
(a TensorverbsError, which holds or replaces them), and gives them back as an exception of
the caller's code (a signal handler's) ends it. A tensor passed by handle that the call
opened from an answer in hand is released to its sender only as the hand is emptied so
(:func:`release_later`): given back, its descriptor is opened again by the next recv of it.
A leaf module: the wrapper is below every other."""
from __future__ import annotations

import threading
from typing import Any, Callable


class _Hand(threading.local):
    #: (core, steps, sources, names, answers) of the answers in hand, or (core, step,
    #: source, name, answer) of one recv's: the core's give_back(step, src, name, dtype,
    #: shape, is_dead, payload) takes each answer back
    held: tuple[Any, Any, Any, Any, Any] | None = None
    #: the future of the recv the public call started last (a recv_async's), or the list of
    #: a batch's, before its caller has them: cancelled, or (settled) their tensors given back
    started: Any = None
    #: the releases of the tensors passed by handle the call opened from its answers in
    #: hand, (function, arguments) each: made as the hand is emptied, dropped as the
    #: answers are given back
    releases: list[tuple[Callable[..., object], tuple[Any, ...]]] | None = None


IN_HAND = _Hand()


def release_later(release: Callable[..., object], *args: Any) -> bool:
    """Put ``release(*args)``, the release of a tensor passed by handle that this thread
    opened, off until its public call's caller has the result (:func:`emptied`), when the
    descriptor came in an answer in hand; False (nothing done) when no answer is in hand."""
    if IN_HAND.held is None:
        return False
    if IN_HAND.releases is None:
        IN_HAND.releases = []
    IN_HAND.releases.append((release, args))
    return True


def emptied() -> None:
    """This thread's public call ended without giving its answers back (its caller has
    them, or they failed with the call): empty the hand, making the releases put off."""
    releases, IN_HAND.releases = IN_HAND.releases, None
    IN_HAND.held = IN_HAND.started = None
    for release, args in releases or ():
        release(*args)


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
    """Give this thread's answers in hand back to their core (those that carry a tensor,
    a descriptor opened too: its release is dropped), and the recvs it started up; empty
    the hand."""
    give_up_started()
    held, IN_HAND.held, IN_HAND.releases = IN_HAND.held, None, None
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
