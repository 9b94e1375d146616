"""What the tests of blocks run in a child task: a paged buffer of pattern blocks sent as blocks."""
from __future__ import annotations

import numpy as np

from tensorverbs.local_cluster import pattern


def paged(rows: int, block: tuple[int, ...], dtype: str, seed: int) -> np.ndarray:
    """A buffer of ``rows`` blocks of ``block`` (dtype), each row its own pattern."""
    itemsize = np.dtype(dtype).itemsize
    nbytes = int(np.prod(block, dtype=np.int64)) * itemsize
    return np.stack([pattern(nbytes, seed + r).view(dtype).reshape(block) for r in range(rows)]) if rows else \
        np.empty((0, *block), dtype)


def send_blocks(server, name: str, to: str, step: int, rows: int, block: tuple[int, ...], dtype: str, seed: int,
                index: list[int] | None = None, wait: float | None = 60.0) -> str:
    """Send rows of a pattern buffer as blocks; with ``wait``, wait for the handle: "delivered",
    or the handle's error's repr."""
    handle = server.send_blocks(name, paged(rows, block, dtype, seed), to, step, index=index)
    if wait is None:
        return "sent"
    try:
        handle.wait(wait)
    except Exception as exc:  # the outcome is the answer
        return repr(exc)
    return "delivered"


def send_rows(server, name: str, to: str, step: int, rows: int, nbytes: int, seed: int) -> None:
    """Send each row of a pattern buffer as an ordinary tensor ``f"{name}/{r}"``."""
    for r, row in enumerate(paged(rows, (nbytes,), "uint8", seed)):
        server.send(f"{name}/{r}", row, to, step)
