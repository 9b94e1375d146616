"""What the one-sided suites share: the variants they run on, a pair of tasks (the ps in a
process of its own, the worker here) for a module's fixture, and a buffer the ps registers."""
from __future__ import annotations

from typing import Iterator

import tensorverbs as tv
from variants import IBVERBS, VARIANTS, Pair, start_pair

WAIT = 60.0
ONE_SIDED_VARIANTS = ["grpc", "verbs", "verbs-tcp"] + (["ibverbs"] if IBVERBS else [])


def pair_of(variant: str) -> Iterator[Pair]:
    """A module fixture's pair on ``variant``: yielded, then stopped."""
    protocol, env = VARIANTS[variant]
    p = start_pair(protocol, env)
    yield p
    p.worker.stop()
    p.ps.stop()


def register(pair: Pair, nbytes: int, seed: int, **kwargs) -> tv.RemoteBuffer:
    """A tensor of ``pattern(nbytes, seed)`` registered by the ps (its own process)."""
    return pair.ps.run("remote_buffers:register_pattern", nbytes, seed, **kwargs)
