"""What the one-sided suites share: the variants they run on, the pair of tasks of a
module's fixture (:func:`variants.pair_of`), and a buffer the ps registers."""
from __future__ import annotations

import tensorverbs as tv
from variants import IBVERBS, Pair

WAIT = 60.0
ONE_SIDED_VARIANTS = ["grpc", "verbs", "verbs-tcp"] + (["ibverbs"] if IBVERBS else [])


def register(pair: Pair, nbytes: int, seed: int, **kwargs) -> tv.RemoteBuffer:
    """A tensor of ``pattern(nbytes, seed)`` registered by the ps (its own process)."""
    return pair.ps.run("remote_buffers:register_pattern", nbytes, seed, **kwargs)
