"""What every contender shares: the tensors, the two roles and the timing of a fetch.

A transfer is receiver-initiated: the sink asks, the source answers with the tensor.
Both sides make the tensor of a size from the same seed, so nothing large crosses the
benchmark's pipes, and the sink checks the bytes it got against its own copy. Each side
measures its own process's CPU time (user + system, every thread), so that the report
can give the CPU a transfer costs on each side.
"""
from __future__ import annotations

import concurrent.futures
import functools
import time
from concurrent.futures import Future
from typing import Any, Callable

import numpy as np


def payload(nbytes: int) -> np.ndarray:
    """The float32 tensor of ``nbytes`` (a multiple of 4), the same in every process."""
    return np.random.default_rng(nbytes).standard_normal(nbytes // 4, dtype=np.float32)


def same_bytes(got: Any, want: np.ndarray) -> bool:
    """Whether ``got`` holds exactly the bytes of ``want``."""
    got = np.ascontiguousarray(got).reshape(-1).view(np.uint8)
    return got.size == want.nbytes and bool(np.array_equal(got, want.view(np.uint8)))


class Payloads:
    """The payload of the size used last (one size at a time keeps memory bounded)."""

    def __init__(self) -> None:
        self._nbytes = -1
        self._array: np.ndarray | None = None

    def get(self, nbytes: int) -> np.ndarray:
        if nbytes != self._nbytes:
            self._array = None
            self._array, self._nbytes = payload(nbytes), nbytes
        return self._array


class Source:
    """The answering side. ``passive`` sources only offer the tensors (``serve`` returns
    at once and the sink may start after it); the others answer in a loop that runs while
    the sink fetches."""

    passive = True

    def offer(self, nbytes: int) -> Any:
        """What the sink needs to fetch tensors of ``nbytes`` (handed to its
        :meth:`Sink.accept` before each round; untimed): nothing, unless overridden."""
        return None

    def offer_blocks(self, nbytes: int, count: int) -> Any:
        """What the sink needs to fetch ``count`` payloads of ``nbytes`` as blocks (see
        :meth:`serve_blocks`): what :meth:`offer` gives, unless overridden."""
        return self.offer(nbytes)

    def serve(self, nbytes: int, count: int, step: int) -> None:
        raise NotImplementedError

    def serve_blocks(self, nbytes: int, count: int, step: int) -> None:
        """``count`` payloads as the rows of one buffer, at ``step`` (only some contenders
        can: those whose sink has :meth:`Sink.fetch_blocks`)."""
        raise NotImplementedError

    def cpu(self) -> float:
        """This process's CPU time so far, seconds."""
        return time.process_time()

    def close(self) -> None:
        """Release what the source holds."""


#: the calls a sink can time one transfer with (see :meth:`Sink.fetch`): the tight loop,
#: a future's result, and a blocking call after the process sat idle
CALLS = ("recv", "recv_async().result()", "recv after idle")
#: how the in-flight rate starts its transfers (see :meth:`Sink.in_flight`): a future each
#: (their results taken in turn, or once all are done by one wait), one batch call for them
#: all, or one call for them all as the rows of one buffer (blocks, sent so too)
FLIGHT_CALLS = ("recv_async", "recv_async, wait", "recv_many", "recv_blocks")
#: where the blocks of a batch land in the sink's paged buffer: rows in an order of their
#: own, as the free pages of a cache are (so that no contender may merge neighbours)


@functools.lru_cache(maxsize=4)
def pages(count: int) -> np.ndarray:
    """The sink's row of each of ``count`` blocks (a fixed permutation)."""
    return np.random.default_rng(count).permutation(count)


#: how long the process sits idle before each "recv after idle" (untimed)
IDLE_GAP = 0.02


class Sink:
    """The asking side: fetches ``count`` tensors one at a time and times each one, or
    (where :meth:`start_one` exists) starts them all at once and times them together."""

    def __init__(self) -> None:
        self.expected = Payloads()

    def fetch(self, nbytes: int, count: int, step: int, verify: bool, offer: Any = None,
              call: str = "recv") -> dict:
        """Seconds of each transfer, the CPU seconds of them all and (with ``verify``)
        whether the first one's bytes are the payload's. ``call`` (one of :data:`CALLS`)
        says how each transfer is asked for; the idle gaps are neither timed nor counted
        as CPU."""
        self.accept(offer)
        self.prepare(nbytes)
        if call == "recv_async().result()":
            return self.timed(lambda i: self.start_one(nbytes, step + i).result(), nbytes, count,
                              verify)
        gap = IDLE_GAP if call == "recv after idle" else 0.0
        return self.timed(lambda i: self.fetch_one(nbytes, step + i), nbytes, count, verify, gap)

    def in_flight(self, nbytes: int, count: int, step: int, verify: bool,
                  offer: Any = None, call: str = "recv_async") -> dict:
        """``count`` transfers started at once (``call``, one of :data:`FLIGHT_CALLS`), then
        awaited: their seconds together (one sample), their CPU seconds and (with
        ``verify``) the first one's check."""
        self.accept(offer)
        self.prepare(nbytes)
        cpu, start = time.process_time(), time.perf_counter()
        if call == "recv_many":
            first = self.fetch_many(nbytes, count, step)[0]
        elif call == "recv_blocks":
            first = self.fetch_blocks(nbytes, count, step)[0]
        else:
            pending = [self.start_one(nbytes, step + i) for i in range(count)]
            if call == "recv_async, wait":
                self.wait_all(pending)
            first = pending[0].result()
            for future in pending[1:]:
                future.result()
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        ok = self.same(first, nbytes) if verify else None
        return {"seconds": [seconds], "cpu": cpu, "ok": ok}

    def same(self, got: Any, nbytes: int) -> bool:
        """Whether ``got``, a transfer's result, holds exactly the payload of ``nbytes``."""
        return same_bytes(got, self.expected.get(nbytes))

    def accept(self, offer: Any) -> None:
        """Take what the source offered for this round (see :meth:`Source.offer`)."""

    def prepare(self, nbytes: int) -> None:
        """Get ready for transfers of ``nbytes`` (untimed)."""

    def fetch_one(self, nbytes: int, step: int) -> Any:
        raise NotImplementedError

    def start_one(self, nbytes: int, step: int) -> Future:
        """Start one transfer without waiting for it (only some contenders can)."""
        raise NotImplementedError

    def wait_all(self, futures: list[Future]) -> None:
        """Wait until every one of ``futures`` (of :meth:`start_one`) is done."""
        concurrent.futures.wait(futures)

    def fetch_many(self, nbytes: int, count: int, step: int) -> list[Any]:
        """``count`` transfers at steps ``step``.. in one batch call (only some contenders
        can)."""
        raise NotImplementedError

    def fetch_blocks(self, nbytes: int, count: int, step: int) -> Any:
        """``count`` transfers at ``step`` into the rows of one buffer, in one call (only
        some contenders can): the buffer."""
        raise NotImplementedError

    def timed(self, once: Callable[[int], Any], nbytes: int, count: int, verify: bool,
              gap: float = 0.0) -> dict:
        seconds, ok = [], None
        cpu = 0.0
        for i in range(count):
            if gap:
                time.sleep(gap)
            cpu -= time.process_time()
            start = time.perf_counter()
            out = once(i)
            seconds.append(time.perf_counter() - start)
            cpu += time.process_time()
            if verify and ok is None:
                ok = self.same(out, nbytes)
            del out  # a pooled buffer returns to its pool before the next transfer
        return {"seconds": seconds, "cpu": cpu, "ok": ok}

    def close(self) -> None:
        """Release what the sink holds."""
