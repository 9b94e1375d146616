"""Threads for the blocking native calls a peer's request makes (a set-up's connect may
dial the peer for seconds), run from the event loop.

A peer has at most a few calls running at once (``per_peer``), and no peer waits for
another's: a call runs on an idle thread, or on a new one while fewer than MAX_THREADS run.
So a peer whose set-ups hang (it gave an address that never answers) holds ``per_peer``
threads, and holds up only its own set-ups; the threads in use are bounded by the peers
with a call under way (the tasks of the cluster, which the callers check names against)."""
from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

T = TypeVar("T")

#: the most threads that run peers' calls at once (peers beyond wait for one)
MAX_THREADS = 256


class PeerThreads:
    """Runs blocking calls for peers, ``per_peer`` of a peer's at a time; threads named
    ``{name}_N``."""

    def __init__(self, name: str, per_peer: int = 1) -> None:
        self._threads = ThreadPoolExecutor(MAX_THREADS, thread_name_prefix=name)
        self._per_peer = per_peer
        #: each peer's turns (on the loop), while one of its calls runs or waits for one
        self._turns: dict[str, asyncio.Semaphore] = {}
        self._users: dict[str, int] = {}  # peer -> its calls running or waiting (on the loop)

    async def run(self, peer: str, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on a thread, once fewer than ``per_peer`` calls of ``peer`` run (on
        the loop). A caller that gives up waiting leaves its turn taken until the call ends."""
        loop = asyncio.get_running_loop()
        turn = self._turns.get(peer)
        if turn is None:
            turn = self._turns[peer] = asyncio.Semaphore(self._per_peer)
        self._users[peer] = self._users.get(peer, 0) + 1
        try:
            await turn.acquire()
        except BaseException:
            self._left(peer)
            raise
        try:
            call = self._threads.submit(fn, *args)
        except BaseException:
            self._release(peer, turn)
            raise

        def ended(_: Any) -> None:
            try:
                loop.call_soon_threadsafe(self._release, peer, turn)
            except RuntimeError:  # the loop closed
                pass

        call.add_done_callback(ended)
        return await asyncio.wrap_future(call)

    def _release(self, peer: str, turn: asyncio.Semaphore) -> None:
        turn.release()
        self._left(peer)

    def _left(self, peer: str) -> None:
        """One of ``peer``'s calls ended (or gave up waiting): its turns go with its last."""
        users = self._users[peer] - 1
        if users:
            self._users[peer] = users
        else:
            del self._users[peer], self._turns[peer]

    def close(self) -> None:
        """Let the calls under way finish (without waiting for them); those not started
        are cancelled, later ones fail."""
        self._threads.shutdown(wait=False, cancel_futures=True)
