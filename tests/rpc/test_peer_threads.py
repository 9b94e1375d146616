"""PeerThreads: a peer's blocking calls run a few at a time, and a peer keeps nothing once
its calls ended (the names callers claim are untrusted: each must not leave state behind)."""
from __future__ import annotations

import asyncio
import threading

from tensorverbs.rpc.peer_threads import PeerThreads


def test_a_peers_calls_take_turns_and_leave_nothing_once_ended():
    threads = PeerThreads("test-peer", per_peer=2)
    gate = threading.Event()
    running: list[str] = []
    lock = threading.Lock()

    def call(peer: str) -> str:
        with lock:
            running.append(peer)
        gate.wait(30)
        return peer

    async def main() -> list[str]:
        calls = [asyncio.ensure_future(threads.run(f"p{i % 50}", call, f"p{i % 50}")) for i in range(150)]
        while len(running) < 100:  # two of each of the 50 peers' three calls (polled)
            await asyncio.sleep(0.01)
        with lock:
            at_once = len(running)
        gate.set()
        done = await asyncio.gather(*calls)
        assert at_once == 100, f"{at_once} calls ran at once, 100 expected (2 of each peer)"
        return done

    try:
        done = asyncio.run(main())
    finally:
        gate.set()
        threads.close()
    assert sorted(done) == sorted(f"p{i % 50}" for i in range(150))
    assert not threads._turns and not threads._users
