"""What the tasks of tests/test_tensor_list.py run in their own processes
(``TaskProcess.run("tensor_lists:<function>", ...)``): each function takes the task's
Server first."""
from __future__ import annotations

import ml_dtypes
import numpy as np

import tensorverbs as tv
from tensorverbs.local_cluster import pattern, same


def tensors(seed: int, big: int = 3 << 20) -> list[np.ndarray]:
    """A parameter group: mixed dtypes, ranks and sizes (a scalar, an empty one, a large one)."""
    return [pattern(4000, seed, np.float32).reshape(10, 100), pattern(16, seed + 1, np.int64),
            np.zeros((0, 3), np.uint8), np.array(2.5, np.float16),
            pattern(12, seed + 2, ml_dtypes.bfloat16).reshape(2, 3), pattern(big, seed + 3)]


def send_list(server: tv.Server, name: str, to, step_id: int, seed: int) -> None:
    """Send :func:`tensors` as one TensorList (``to`` a task or a list of them)."""
    server.send(name, tv.TensorList(tensors(seed)), to, step_id)


def received_as_sent(server: tv.Server, name: str, source: str, step_id: int, seed: int) -> bool:
    """Whether a recv of ``name`` gives :func:`tensors` of ``seed`` as a list."""
    got = server.recv(name, source, step_id, timeout=60)
    return isinstance(got, list) and len(got) == 6 and all(
        g.dtype == w.dtype and g.shape == w.shape and same(g, w)
        for g, w in zip(got, tensors(seed)))
