"""gloo's broadcast (``torch.distributed``, the gloo backend) as the contender of ``bench
sync``'s broadcast and relay: the trainer and every receiver join one process group (the
trainer rank 0), and a round is one ``broadcast`` per tensor from rank 0, all started at
once (``async_op``) and waited for; every member times its part on the host's monotonic
clock. Each member uses its host's one interface (with ``--hosts``, its network
namespace's veth end; else loopback)."""
from __future__ import annotations

import datetime
import os
import socket
import time
from typing import Sequence

import numpy as np

from .contenders import torch_common


def available() -> tuple[bool, str]:
    """Whether torch.distributed with gloo can run here, and why not."""
    ok, reason = torch_common.available("gloo")
    if ok:
        import torch.distributed as dist

        if not dist.is_gloo_available():
            return False, reason + " without gloo"
    return ok, reason


#: how long members wait for each other to join (seconds)
JOIN_SECONDS = 120.0


def _interface(init_method: str) -> str:
    """This member's interface: loopback for a group on this host's loopback, else its
    network namespace's one link."""
    names = [name for _, name in socket.if_nameindex() if name != "lo"]
    return names[0] if len(names) == 1 and "//127.0.0.1:" not in init_method else "lo"


class GlooMember:
    """One member of the group (rank 0: the trainer, whose ``tensors`` are broadcast into
    the others')."""

    def __init__(self, init_method: str, rank: int, world: int, tensors: Sequence[np.ndarray]) -> None:
        import torch
        import torch.distributed as dist

        os.environ.setdefault("GLOO_SOCKET_IFNAME", _interface(init_method))
        torch_common.quiet()
        dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=JOIN_SECONDS))
        self.tensors = [torch.from_numpy(t) for t in tensors]

    def round(self) -> tuple[float, float]:
        """Broadcast every tensor from rank 0; (start, end) on the monotonic clock."""
        import torch.distributed as dist

        start = time.perf_counter()
        works = [dist.broadcast(t, src=0, async_op=True) for t in self.tensors]
        for work in works:
            work.wait()
        return start, time.perf_counter()

    def close(self) -> None:
        import torch.distributed as dist

        dist.destroy_process_group()
