"""Run in a task's process (``TaskProcess.call("run", "interrupting:...")``): a blocking
recv that a signal interrupts."""
from __future__ import annotations

import signal
import time
from typing import Any


class Signalled(Exception):
    """What the SIGUSR1 handler of :func:`interrupted_recv` raises."""


def _raise(signum, frame) -> None:
    raise Signalled(f"signal {signum}")


def interrupted_recv(server, name: str, source: str, step_id: int, timeout: float,
                     elsewhere: bool = False) -> tuple[str, float] | None:
    """Block in ``server.recv`` until a signal's handler raises (SIGINT: KeyboardInterrupt,
    SIGUSR1: Signalled); returns (the exception's class name, the monotonic time it reached
    this frame), or None if the recv returned or failed otherwise.

    ``elsewhere``: the main thread blocks both signals while it waits, so that another
    thread of the process (the core's, gRPC's, the event loop's) takes the signal and runs
    its C handler. Python runs the handler itself in the main thread at its next chance,
    but nothing interrupts a sleep of the main thread. That makes certain what happens by
    chance when the signal comes just before the main thread's wait goes to sleep (its C
    handler runs in the main thread then, and the sleep that follows is not interrupted)."""
    return _interrupted(lambda: server.recv(name, source, step_id, timeout), elsewhere)


def interrupted_wait(server, name: str, source: str, step_id: int, timeout: float, elsewhere: bool,
                     nbytes: int, completed: bool) -> tuple[str, float] | None:
    """:func:`interrupted_recv` of ``tensorverbs.wait`` (``tensorverbs.as_completed`` with
    ``completed``) for a ``recv_async`` of ``name`` into an array of ``nbytes`` (a future
    the native core does not keep an answer for: the wait is concurrent.futures'); the
    recv cancelled once the wait ended (as a caller gives up what it waited for). The recv
    starts where the signal is caught: the test signals once its request reached the
    sender, which may be before ``recv_async`` returned."""
    import numpy as np

    import tensorverbs as tv

    def wait() -> None:
        fut = None
        try:
            fut = server.recv_async(name, source, step_id, timeout, out=np.empty(nbytes, np.uint8))
            if completed:
                next(tv.as_completed([fut], timeout))
            else:
                tv.wait([fut], timeout)
        finally:
            if fut is not None:
                fut.cancel()

    return _interrupted(wait, elsewhere)


def interrupted_recv_many(server, names: list[str], source: str, step_id: int,
                          timeout: float) -> tuple[str, float] | None:
    """:func:`interrupted_recv` of a batch: ``server.recv_many`` of ``names``."""
    return _interrupted(lambda: server.recv_many([(n, source, step_id) for n in names], timeout), False)


def interrupted_recv_blocks(server, name: str, source: str, step_id: int, rows: int, nbytes: int,
                            timeout: float) -> tuple[str, float] | None:
    """:func:`interrupted_recv` of blocks: ``server.recv_blocks`` of ``rows`` rows of ``nbytes``."""
    import numpy as np

    out = np.zeros((rows, nbytes), np.uint8)
    return _interrupted(lambda: server.recv_blocks(name, source, out, step_id, timeout=timeout), False)


def _interrupted(recv, elsewhere: bool) -> tuple[str, float] | None:
    # Ctrl-C raises KeyboardInterrupt even in a process started with SIGINT ignored (as a
    # background job's children are, which Python then leaves ignored)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGUSR1, _raise)
    masked = {signal.SIGINT, signal.SIGUSR1}
    if elsewhere:
        signal.pthread_sigmask(signal.SIG_BLOCK, masked)
    try:
        recv()
    except (KeyboardInterrupt, Signalled) as exc:
        return type(exc).__name__, time.monotonic()
    except Exception:
        return None
    finally:
        if elsewhere:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, masked)
    return None


def interrupted_settle(server, name: str, source: str, step_id: int, at: str,
                       timeout: float) -> tuple[str | None, bool, bool, bool]:
    """``server.recv_async(...).result()`` on the main thread (its tensor sent while it waits:
    :func:`send_when_told` in the sender, told as this thread begins to wait), with
    a KeyboardInterrupt raised as the first call of function ``at`` begins in this thread
    (where a signal's handler may run it, while this thread settles the future it waited
    for). Returns (the class of what ``result`` raised, or None; whether the future then
    gives the tensor within ``timeout``; whether a done-callback added before ran; whether
    the interrupt was raised: False when the answer came before this thread waited for it,
    and the core's settler thread settled the future)."""
    import sys
    import threading

    import numpy as np

    fut = server.recv_async(name, source, step_id, timeout)
    called = threading.Event()
    fut.add_done_callback(lambda _: called.set())
    told: list[Any] = []
    fired: list[str] = []

    def trace(frame, event, arg):
        if event == "call" and frame.f_code.co_name == "_done_within" and not told:
            # this thread is about to wait for the answer: the sender may send it now
            # (sent before, its answer could come to the settler thread instead)
            told.append(server.send(f"go:{name}", np.zeros(1, np.uint8), source, step_id))
        if event == "call" and frame.f_code.co_name == at:
            sys.settrace(None)
            fired.append(at)
            raise KeyboardInterrupt(f"interrupted in {at}")
        return None

    raised = None
    sys.settrace(trace)
    try:
        fut.result(timeout)
    except BaseException as exc:
        raised = type(exc).__name__
    finally:
        sys.settrace(None)
    try:
        got = isinstance(fut.result(timeout), np.ndarray)
    except Exception:
        got = False
    return raised, got, called.wait(timeout), bool(fired)


def send_when_told(server, name: str, to: str, step_id: int, nbytes: int, timeout: float) -> None:
    """Send ``name`` (``pattern(nbytes, step_id)``) to ``to`` once ``to`` sent ``go:<name>``."""
    from tensorverbs.local_cluster import pattern

    server.recv(f"go:{name}", to, step_id, timeout)
    server.send(name, pattern(nbytes, step_id), to, step_id)


#: the array of the last :func:`interrupted_read`, looked at once its owner runs again
_read_into: list[Any] = []


def interrupted_read(server, buffer, nbytes: int, timeout: float) -> tuple[str, float] | None:
    """``server.read`` of ``buffer`` (whose owner is stopped) into a zeroed array of
    ``nbytes`` on the main thread, until the SIGINT that another thread of this process
    sends once the access is under way (``stats()["remote_accesses_in_flight"]``), as
    Ctrl-C would; returns as :func:`interrupted_recv`."""
    import os
    import threading

    import numpy as np

    out = np.zeros(nbytes, np.uint8)
    _read_into[:] = [out]

    def interrupt() -> None:
        deadline = time.monotonic() + timeout
        while server.stats()["remote_accesses_in_flight"] == 0:  # a condition, polled
            if time.monotonic() > deadline:
                return
            time.sleep(0.001)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    return _interrupted(lambda: server.read(buffer, out, timeout=timeout), False)


def read_into_untouched(server) -> bool:
    """Whether nothing landed in the array of the last :func:`interrupted_read`."""
    return not _read_into[0].any()


def raise_named(server, name: str | None) -> None:
    """Raise the builtin exception ``name`` (KeyboardInterrupt, SystemExit; None: nothing)."""
    import builtins

    if name is not None:
        raise getattr(builtins, name)
