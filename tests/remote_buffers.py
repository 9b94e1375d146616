"""What the tasks of tests/test_remote_buffer*.py run in their own processes
(``TaskProcess.run("remote_buffers:<function>", ...)``): each function takes the task's
Server first. Registered tensors are kept here, as an application would keep them."""
from __future__ import annotations

from typing import Any

import numpy as np

import tensorverbs as tv
from tensorverbs.local_cluster import pattern, same

#: the tensors this process registered, by rkey
_kept: dict[int, np.ndarray] = {}


def register_pattern(server: tv.Server, nbytes: int, seed: int, dtype: str = "uint8",
                     shape: tuple[int, ...] | None = None, writable: bool = True,
                     allocated: bool = False) -> tv.RemoteBuffer:
    tensor = pattern(nbytes, seed, dtype)
    if shape is not None:
        tensor = tensor.reshape(shape)
    if allocated:  # in the server's memory for one-sided access
        tensor = _copy_into(server.allocate(tensor.shape, tensor.dtype, one_sided=True), tensor)
    buffer = server.register(tensor, writable=writable)
    _kept[buffer.rkey] = tensor
    return buffer


def holds(server: tv.Server, buffer: tv.RemoteBuffer, start: int, nbytes: int, seed: int) -> bool:
    """Whether bytes [start, start + nbytes) of the registered tensor are ``pattern(nbytes, seed)``."""
    flat = _kept[buffer.rkey].reshape(-1).view(np.uint8)
    return same(flat[start:start + nbytes], pattern(nbytes, seed))


def read_matches(server: tv.Server, buffer: tv.RemoteBuffer, nbytes: int, seed: int,
                 **kwargs: Any) -> bool:
    """Whether a read of ``buffer`` gives ``pattern(nbytes, seed)``'s bytes."""
    got = server.read(buffer, timeout=60, **kwargs)
    return same(got.reshape(-1).view(np.uint8), pattern(nbytes, seed))


def read_error(server: tv.Server, buffer: tv.RemoteBuffer) -> tuple[str, str]:
    """(the class of the error a read of ``buffer`` raises, its message)."""
    try:
        server.read(buffer, timeout=60)
    except tv.TensorverbsError as exc:
        return type(exc).__name__, str(exc)
    return "", ""


def _copy_into(target: np.ndarray, source: np.ndarray) -> np.ndarray:
    target[...] = source
    return target
