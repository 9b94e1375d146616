"""Benchmark peers: one object living in a child process, driven over a pipe.

A :class:`Peer` is a :class:`~tensorverbs.child_process.ChildProcess` built from
``"module:callable"``: ``post`` starts a method without waiting, so the peers of a
benchmark work concurrently, and a method may call :func:`tensorverbs.child_process.report`
to send progress to its parent while it runs. Whatever goes wrong in a peer is a
:class:`PeerError` carrying the child's traceback. Timings are taken inside the child,
never across the pipe.
"""
from __future__ import annotations

from typing import Any

from ..child_process import ChildProcess


class PeerError(RuntimeError):
    """A method failed in a peer (the message carries the child's traceback)."""


class Peer(ChildProcess):
    """``factory`` ("module:callable") built with ``args``/``kwargs`` in a child process."""

    def __init__(self, name: str, factory: str, *args: Any, env: dict[str, str] | None = None,
                 wait: bool = True, **kwargs: Any) -> None:
        super().__init__(name, factory, *args, env=env, wait=wait, process_name=f"bench-{name}", **kwargs)

    def timed_out(self, timeout: float) -> BaseException:
        return PeerError(f"{self.name} did not answer within {timeout:g} s")

    def exited(self) -> BaseException:
        return PeerError(f"{self.name} exited (code {self.process.exitcode})")

    def failed(self, error: BaseException | None, trace: str) -> BaseException:
        return PeerError(f"{self.name} failed:\n{trace}")

    def close(self) -> None:
        """End the child process (see :func:`close_all` for an orderly stop)."""
        self.kill()


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
    try:
        for peer in posted:
            try:
                peer.result(timeout)
            except (PeerError, OSError):
                pass
    finally:  # every process ends, whatever the closes did
        for peer in peers:
            peer.process.join(5)
            peer.close()
