"""Benchmark peers: one object living in a child process, driven over a pipe.

A :class:`Peer` starts a fresh Python (multiprocessing "spawn"), applies its environment,
builds ``factory(*args, **kwargs)`` there and then runs the methods its parent names,
one at a time, sending back each result (or the error, with the child's traceback).
:meth:`Peer.post` starts a method without waiting, so the peers of a benchmark work
concurrently; a method may call :func:`report` to send progress to its parent while it
runs. Timings are taken inside the child, never across the pipe.
"""
from __future__ import annotations

import importlib
import multiprocessing as mp
import os
import traceback
from typing import Any, Callable

#: how long the parent waits for a child's answer (seconds)
TIMEOUT = 600.0

_conn = None  # the child's end of the pipe, for report()


class PeerError(RuntimeError):
    """A method failed in a peer (the message carries the child's traceback)."""


def _load(path: str) -> Callable[..., Any]:
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


def report(value: Any) -> None:
    """From a method running in a peer: send ``value`` to the parent's progress callback."""
    if _conn is not None:
        _conn.send(("progress", value))


def _main(conn, factory: str, args: tuple, kwargs: dict, env: dict[str, str]) -> None:
    global _conn
    _conn = conn
    os.environ.update(env)
    try:
        obj = _load(factory)(*args, **kwargs)
    except BaseException:
        conn.send(("error", traceback.format_exc()))
        return
    conn.send(("ok", None))
    while True:
        try:
            method, margs, mkwargs = conn.recv()
        except EOFError:
            break
        try:
            conn.send(("ok", getattr(obj, method)(*margs, **mkwargs)))
        except BaseException:
            conn.send(("error", traceback.format_exc()))
        if method == "close":
            break


class Peer:
    """``factory`` ("module:callable") built with ``args``/``kwargs`` in a child process."""

    def __init__(self, name: str, factory: str, *args: Any, env: dict[str, str] | None = None,
                 wait: bool = True, **kwargs: Any) -> None:
        ctx = mp.get_context("spawn")
        self.name = name
        self._conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_main, name=f"bench-{name}", daemon=True,
                                   args=(child, factory, args, kwargs, dict(env or {})))
        self.process.start()
        child.close()
        if wait:
            self.result()

    def post(self, method: str, *args: Any, **kwargs: Any) -> None:
        """Start ``method`` in the child; :meth:`result` collects its answer."""
        self._conn.send((method, args, kwargs))

    def result(self, timeout: float = TIMEOUT, progress: Callable[[Any], None] | None = None) -> Any:
        """The answer to the oldest command not collected yet (the first one is the
        construction); ``progress`` receives what the method reports meanwhile."""
        while True:
            if not self._conn.poll(timeout):
                raise PeerError(f"{self.name} did not answer within {timeout:g} s")
            try:
                kind, value = self._conn.recv()
            except EOFError:
                raise PeerError(f"{self.name} exited (code {self.process.exitcode})") from None
            if kind == "progress":
                if progress is not None:
                    progress(value)
                continue
            if kind == "error":
                raise PeerError(f"{self.name} failed:\n{value}")
            return value

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        self.post(method, *args, **kwargs)
        return self.result()

    def close(self) -> None:
        """End the child process (see :func:`close_all` for an orderly stop)."""
        if self.process.is_alive():
            self.process.kill()
        self.process.join(10)


def close_all(peers: list[Peer], timeout: float = 30.0) -> None:
    """Call ``close`` on every live peer at once (collective shutdowns need that), then
    end the processes."""
    posted = []
    for peer in peers:
        if peer.process.is_alive():
            try:
                peer.post("close")
                posted.append(peer)
            except (BrokenPipeError, OSError):
                pass
    for peer in posted:
        try:
            peer.result(timeout)
        except PeerError:
            pass
    for peer in peers:
        peer.process.join(5)
        peer.close()
