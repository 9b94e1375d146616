"""What the CUDA tests run in a task's child process (``TaskProcess.run``)."""
from __future__ import annotations

from tensorverbs.local_cluster import pattern


def send_cuda_pattern(server, name: str, to: str, step_id: int, nbytes: int, seed: int) -> None:
    """Send the float32 pattern of ``nbytes`` and ``seed`` from cuda:0."""
    import torch

    server.send(name, torch.from_numpy(pattern(nbytes, seed, "float32")).to("cuda:0"), to, step_id)
