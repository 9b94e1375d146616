"""One object in a child process, driven over a pipe.

A :class:`ChildProcess` starts a fresh Python (multiprocessing "spawn"), optionally moves
it into a network namespace, applies environment variables, builds ``factory(*args,
**kwargs)`` there and then runs the methods its parent names, one at a time, sending back
each result (or the error, with the child's traceback). :meth:`ChildProcess.post` starts
a method without waiting, so that several children work at once; a method may call
:func:`report` to send progress to its parent while it runs. Subclasses choose the errors
the parent raises: the local cluster's :class:`~tensorverbs.local_cluster.TaskProcess`
raises the child's own, the benchmarks' :class:`~tensorverbs.bench.peer.Peer` a
``PeerError`` carrying the child's traceback.
"""
from __future__ import annotations

import ctypes
import importlib
import multiprocessing as mp
import os
import pickle
import signal
import traceback
from typing import Any, Callable

#: how long the parent waits for a child's answer by default (seconds)
TIMEOUT = 600.0

_conn = None  # the child's end of the pipe, for report()


def load(path: str) -> Any:
    """What ``"module:name"`` names."""
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


def report(value: Any) -> None:
    """From a method running in a child: send ``value`` to the parent's progress callback."""
    if _conn is not None:
        _conn.send(("progress", value))


def _enter_netns(name: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
    if libc.setns(fd, 0x40000000) != 0:  # CLONE_NEWNET
        raise OSError(ctypes.get_errno(), f"setns({name}) failed")
    os.close(fd)


def _failure(error: BaseException) -> tuple[BaseException | None, str]:
    """(the error, if it can cross the pipe, and the child's traceback of it)."""
    trace = traceback.format_exc()
    try:
        pickle.dumps(error)
    except Exception:
        return None, trace
    return error, trace


def _main(conn, factory: str | Callable[..., Any], args: tuple, kwargs: dict,
          env: dict[str, str], netns: str | None, last: str) -> None:
    global _conn
    _conn = conn
    try:
        if netns:
            _enter_netns(netns)
        os.environ.update(env)
        obj = (load(factory) if isinstance(factory, str) else factory)(*args, **kwargs)
    except BaseException as exc:
        conn.send(("error", _failure(exc)))
        return
    conn.send(("ok", None))
    while True:
        try:
            method, margs, mkwargs = conn.recv()
        except EOFError:
            break
        try:
            conn.send(("ok", getattr(obj, method)(*margs, **mkwargs)))
        except BaseException as exc:  # sent back and raised in the parent
            conn.send(("error", _failure(exc)))
        if method == last:
            break


class ChildProcess:
    """``factory`` (a callable or "module:callable") built with ``args``/``kwargs`` in a
    child process called ``name``; ``wait`` waits until it is built (:meth:`ready`)."""

    #: the method after which the child ends
    last_method = "close"
    #: how long the parent waits for an answer unless told (seconds)
    timeout = TIMEOUT

    def __init__(self, name: str, factory: str | Callable[..., Any], *args: Any,
                 env: dict[str, str] | None = None, netns: str | None = None, wait: bool = True,
                 process_name: str | None = None, **kwargs: Any) -> None:
        ctx = mp.get_context("spawn")
        self.name = name
        self._conn, child = ctx.Pipe()
        self.process = ctx.Process(
            target=_main, name=process_name or name, daemon=True,
            args=(child, factory, args, kwargs, dict(env or {}), netns, self.last_method))
        self.process.start()
        child.close()
        self._up = False
        if wait:
            self.ready()

    # -- what the parent raises; subclasses choose -----------------------------------------
    def timed_out(self, timeout: float) -> BaseException:
        """The error of a child that did not answer within ``timeout`` seconds."""
        return TimeoutError(f"{self.name} did not answer within {timeout:g} s")

    def exited(self) -> BaseException:
        """The error of a child whose process ended."""
        return EOFError(f"{self.name} exited (code {self.process.exitcode})")

    def failed(self, error: BaseException | None, trace: str) -> BaseException:
        """The error to raise for ``error`` raised in the child (None: it could not cross
        the pipe), with the child's ``trace``. A child's KeyboardInterrupt or SystemExit is
        a RuntimeError here: raised as it is, it would interrupt or end the parent."""
        if isinstance(error, Exception):
            return error
        return RuntimeError(f"{self.name} failed:\n{trace}")

    # -- commands ------------------------------------------------------------------------------
    def ready(self, timeout: float | None = None) -> None:
        """Wait until the child's object is built (raising the error building it raised);
        returns at once when it was seen built already."""
        if not self._up:
            self._reply(self.timeout if timeout is None else timeout, None)
            self._up = True

    def post(self, method: str, *args: Any, **kwargs: Any) -> None:
        """Start ``method`` in the child without waiting; :meth:`result` collects it."""
        self._conn.send((method, args, kwargs))

    def result(self, timeout: float | None = None, progress: Callable[[Any], None] | None = None) -> Any:
        """The result of the oldest :meth:`post` not collected yet (after the child's
        start-up, which it waits for first); ``progress`` receives what the method
        reports meanwhile."""
        self.ready()
        return self._reply(self.timeout if timeout is None else timeout, progress)

    def call(self, method: str, *args: Any, timeout: float | None = None, **kwargs: Any) -> Any:
        """Run ``method`` in the child and return its result or raise its error."""
        self.post(method, *args, **kwargs)
        return self.result(timeout)

    def _reply(self, timeout: float, progress: Callable[[Any], None] | None) -> Any:
        while True:
            if not self._conn.poll(timeout):
                raise self.timed_out(timeout)
            try:
                kind, value = self._conn.recv()
            except (EOFError, OSError):  # (a child that died with a reply unread: a reset)
                self.process.join(5)
                raise self.exited() from None
            if kind == "progress":
                if progress is not None:
                    progress(value)
                continue
            if kind == "error":
                raise self.failed(*value)
            return value

    # -- the process ---------------------------------------------------------------------------
    def kill(self) -> None:
        """SIGKILL: the child dies without a chance to clean up."""
        if self.process.is_alive():
            assert self.process.pid is not None  # started
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.join(10)
