"""RemoteBuffer: what a task hands out for one of its registered buffers, and the host
arrays one-sided access works on."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..devices import HOST, device_of
from ..dlpack import host_view, is_tensor
from ..errors import InvalidArgumentError
from ..tensor import numeric_dtype


@dataclass(frozen=True)
class RemoteBuffer:
    """A registered buffer of ``task``, as :meth:`tensorverbs.Server.register` describes
    it: small, immutable and serialisable (pickle, or ``dataclasses.asdict`` and
    ``RemoteBuffer(**fields)``), to be handed to any task of the job, which may then
    :meth:`~tensorverbs.Server.read` or :meth:`~tensorverbs.Server.write` it without
    ``task``'s code taking part, until ``task`` unregisters it.

    ``incarnation`` names the process that registered it (a restarted task has another);
    ``addr`` and ``rkey`` are what the transport reaches its bytes with: a descriptor
    forged or kept after ``unregister`` reaches nothing and fails the access.
    """

    task: str
    incarnation: int
    provider: str
    addr: int
    rkey: int
    nbytes: int
    dtype: str
    shape: tuple[int, ...]
    writable: bool

    @property
    def numpy_dtype(self) -> np.dtype:
        return numeric_dtype(self.dtype)

    def span(self, offset: int, nbytes: int | None) -> tuple[int, int]:
        """(offset, nbytes) of an access, checked to lie within the buffer;
        InvalidArgumentError naming the buffer otherwise."""
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise InvalidArgumentError(f"offset must be an int >= 0, not {offset!r}")
        if nbytes is None:
            nbytes = self.nbytes - offset
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
            raise InvalidArgumentError(f"nbytes must be an int >= 0, not {nbytes!r}")
        if offset + nbytes > self.nbytes:
            raise InvalidArgumentError(
                f"bytes [{offset}, {offset + nbytes}) are out of bounds of {self}")
        return offset, nbytes

    def __str__(self) -> str:
        return f"the buffer {self.rkey:#x} of {self.task} ({self.dtype} {tuple(self.shape)}, {self.nbytes} bytes)"


def host_buffer(value: Any, what: str, writable: bool) -> np.ndarray:
    """``value`` (a numpy array, or a host tensor speaking DLPack such as a torch CPU
    tensor) as a C-contiguous numpy array sharing its memory; InvalidArgumentError naming
    ``what`` if it is not one (on a GPU, not contiguous, strings, or read-only when
    ``writable``)."""
    device = device_of(value)
    if device is not HOST:
        raise InvalidArgumentError(
            f"{what} is on {device.name}, which one-sided access cannot reach (it reaches host "
            "memory only: no GPUDirect); give a host tensor")
    array = host_view(value) if is_tensor(value) else value
    if not isinstance(array, np.ndarray):
        raise InvalidArgumentError(f"{what} must be a numpy array or a host tensor, not {type(value).__name__}")
    numeric_dtype(array.dtype)  # numeric: strings have no bytes to reach
    if not array.flags.c_contiguous:
        raise InvalidArgumentError(f"{what} must be C-contiguous")
    if writable and not array.flags.writeable:
        raise InvalidArgumentError(f"{what} must be writable")
    return array
