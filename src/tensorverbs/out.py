"""``recv(..., out=tensor)``: a received tensor written into the caller's tensor, in place.

:class:`Out` holds the caller's tensor (a numpy array, a torch tensor, anything speaking
DLPack, an array of the ``cpu:proxy`` stand-in), the host memory the transport fills (its
own memory on the host, else a host proxy buffer: :meth:`Device.landing`) and what it
expects. A tensor that fits (same dtype and shape) lands there directly where the
protocol can (``grpc`` streams into it; ``grpc+verbs`` writes large tensors into it), else
it is copied in. One that does not fit fails the recv with InvalidArgumentError naming
both and is kept for the next recv of its name and step: it is not lost.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .devices import Device, device_of, get_device
from .errors import InvalidArgumentError
from .tensor import DT_STRING, dtype_enum, mark_dead, numpy_dtype


def _describe(dtype: int, shape: tuple[int, ...]) -> str:
    name = "string" if dtype == DT_STRING else str(numpy_dtype(dtype))
    return f"{name} {tuple(shape)}"


def _address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


class Out:
    """The caller's ``out`` tensor of a recv; ``device`` (a device name) must be its device
    if given. InvalidArgumentError if ``out`` cannot receive (not C-contiguous, read-only,
    strings, another device than asked for)."""

    def __init__(self, out: Any, device: str | None = None) -> None:
        self.target = out
        self.device: Device = device_of(out)
        if device is not None and get_device(device).name != self.device.name:
            raise InvalidArgumentError(f"out is on {self.device.name}, the recv asks for {device}")
        self.landing = self.device.landing(out)
        self.dtype = dtype_enum(self.landing.dtype)
        if self.dtype == DT_STRING:
            raise InvalidArgumentError("out must be a numeric tensor: strings arrive as new arrays")
        self.shape = tuple(self.landing.shape)
        self._where = _address(self.landing)

    @property
    def destination(self) -> tuple[int, tuple[int, ...], np.ndarray]:
        """(DataType, shape, landing): where the native core lands a tensor that fits."""
        return self.dtype, self.shape, self.landing

    def fits(self, dtype: int, shape: tuple[int, ...]) -> bool:
        """Whether a tensor of DataType ``dtype`` and ``shape`` belongs in ``out``."""
        return dtype == self.dtype and tuple(shape) == self.shape

    def refusal(self, what: str, dtype: int, shape: tuple[int, ...], theirs: str = "the sender sent",
                after: str = "; the tensor is kept for the next recv of it") -> InvalidArgumentError:
        """The error of a recv (described by ``what``) whose sender sent another tensor (or
        of another call, whose source's tensor is ``theirs``, the message ending ``after``)."""
        return InvalidArgumentError(
            f"{what}: out expects {_describe(self.dtype, self.shape)}, {theirs} "
            f"{_describe(dtype, shape)}{after}")

    def fill(self, array: np.ndarray, is_dead: bool) -> Any:
        """Put ``array``, a tensor that fits, in ``out`` (copied unless it landed there) and
        return what the recv yields: ``out`` itself, or for a dead tensor a
        :class:`tensorverbs.DeadTensor` over the landing."""
        if array.size and _address(array) != self._where:
            np.copyto(self.landing, array)
        self.device.store(self.target, self.landing)
        return mark_dead(self.landing) if is_dead else self.target
