"""Busy neighbours: processes that keep the processors busy beside a benchmark
(``tensorverbs bench transfer --busy N``), as other work on a shared machine does."""
from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.process import BaseProcess


def _spin() -> None:
    """Computes for ever (until terminated)."""
    while True:
        pass


@contextmanager
def neighbours(count: int) -> Iterator[list[BaseProcess]]:
    """``count`` processes that spin on the processors while the block runs; all are ended
    (and reaped) when it leaves, however it leaves."""
    context = multiprocessing.get_context("spawn")
    started: list[BaseProcess] = []
    try:
        for i in range(count):
            process = context.Process(target=_spin, name=f"busy neighbour {i}", daemon=True)
            process.start()
            started.append(process)
        yield started
    finally:
        for process in started:
            process.terminate()
        for process in started:
            process.join()
