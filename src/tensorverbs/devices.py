"""Devices a tensor can live on, and whether the verbs provider can reach their memory.

Host memory is reachable (DMAable). A GPU without GPUDirect RDMA is not: a tensor sent
from it is copied to host memory first, and a tensor received for it lands in a host
proxy buffer that is then copied to the GPU (the seeds' CPU proxy). ``cpu:proxy`` is a
stand-in for such a device that exists everywhere: plain heap memory the transport
treats as unreachable, so the proxy path runs (and is tested) on machines without GPUs.

A recv into a caller's tensor (``out=``) lands in :meth:`Device.landing` of it: the
tensor's own memory on the host, else a host proxy buffer (pinned memory for a GPU) that
:meth:`Device.store` then copies into the tensor in place.
"""
from __future__ import annotations

import abc
from typing import Any

import numpy as np

from .dlpack import DL_CUDA, DL_CUDA_MANAGED, HOST_TYPES, dlpack_device, host_view, is_tensor
from .errors import InvalidArgumentError
from .torch_interop import as_torch


def _describe(array: np.ndarray) -> str:
    return f"a {array.dtype} array of shape {array.shape} with strides {array.strides}"


def checked_out(array: np.ndarray) -> np.ndarray:
    """``array`` if a tensor can be received into it (C-contiguous and writable), else
    InvalidArgumentError saying why not."""
    if not array.flags.c_contiguous:
        raise InvalidArgumentError(f"out must be C-contiguous, not {_describe(array)}")
    if not array.flags.writeable:
        raise InvalidArgumentError(f"out must be writable, not read-only ({_describe(array)})")
    return array


class Device(abc.ABC):
    """Where tensors live. ``dma`` tells whether the transport can write them directly."""

    name: str
    dma: bool

    @abc.abstractmethod
    def from_host(self, array: np.ndarray) -> Any:
        """A tensor on this device holding a copy of ``array``."""

    @abc.abstractmethod
    def to_host(self, value: Any) -> np.ndarray:
        """A host array holding the contents of ``value``."""

    @abc.abstractmethod
    def landing(self, out: Any) -> np.ndarray:
        """The host memory a tensor received into ``out`` (a tensor on this device) lands
        in; InvalidArgumentError if ``out`` is not C-contiguous and writable."""

    @abc.abstractmethod
    def store(self, out: Any, landing: np.ndarray) -> None:
        """Make ``out`` hold the contents of its :meth:`landing`, in place."""

    def __repr__(self) -> str:
        return f"<device {self.name}>"


class Host(Device):
    """Host memory: reachable by every provider."""

    name, dma = "cpu", True

    def from_host(self, array: np.ndarray) -> np.ndarray:
        return array

    def to_host(self, value: Any) -> np.ndarray:
        return np.asarray(value)

    def landing(self, out: Any) -> np.ndarray:
        if isinstance(out, np.ndarray):
            return checked_out(out)
        if is_tensor(out):
            return checked_out(host_view(out))
        raise InvalidArgumentError(
            f"out must be a numpy array or a tensor speaking DLPack, not {type(out).__name__}")

    def store(self, out: Any, landing: np.ndarray) -> None:
        pass  # the landing is out's own memory


class StandInArray(np.ndarray):
    """An array on the ``cpu:proxy`` stand-in device."""


class StandIn(Device):
    """A device the transport treats as unreachable, backed by plain heap memory."""

    name, dma = "cpu:proxy", False

    def from_host(self, array: np.ndarray) -> StandInArray:
        return np.array(array, copy=True).view(StandInArray)

    def to_host(self, value: Any) -> np.ndarray:
        return np.array(value.view(np.ndarray), copy=True)

    def landing(self, out: Any) -> np.ndarray:
        return np.empty_like(checked_out(out.view(np.ndarray)))

    def store(self, out: Any, landing: np.ndarray) -> None:
        np.copyto(out.view(np.ndarray), landing)


class Cuda(Device):
    """A CUDA GPU through torch, without GPUDirect RDMA (so always through the proxy):
    copies between the GPU and pinned host memory run on a stream of their own."""

    dma = False

    def __init__(self, index: int) -> None:
        import torch

        if not torch.cuda.is_available() or index >= torch.cuda.device_count():
            raise InvalidArgumentError(f"device cuda:{index} does not exist here")
        self.index, self.name = index, f"cuda:{index}"

    def from_host(self, array: np.ndarray) -> Any:
        return as_torch(np.ascontiguousarray(array)).to(self.name)

    def to_host(self, value: Any) -> np.ndarray:
        import torch

        tensor = value if isinstance(value, torch.Tensor) else torch.from_dlpack(value)
        pinned = self._pinned_like(tensor)
        self._copy(pinned, tensor.detach())
        return host_view(pinned)

    def landing(self, out: Any) -> np.ndarray:
        if not out.is_contiguous():
            raise InvalidArgumentError(
                f"out must be contiguous, not a {out.dtype} tensor of shape {tuple(out.shape)} "
                f"with strides {out.stride()}")
        return host_view(self._pinned_like(out))

    def store(self, out: Any, landing: np.ndarray) -> None:
        import torch

        self._copy(out.detach().view(-1).view(torch.uint8),
                   torch.from_numpy(landing.reshape(-1).view(np.uint8)))

    @staticmethod
    def _pinned_like(tensor: Any) -> Any:
        import torch

        return torch.empty(tuple(tensor.shape), dtype=tensor.dtype, pin_memory=True)

    def _copy(self, dst: Any, src: Any) -> None:
        """``dst.copy_(src)`` on a stream of this device, after the work queued on its
        current stream (which produced ``src`` or still reads ``dst``), waited for."""
        import torch

        stream = torch.cuda.Stream(self.name)
        stream.wait_stream(torch.cuda.current_stream(self.name))
        with torch.cuda.stream(stream):
            dst.copy_(src, non_blocking=True)
        stream.synchronize()


HOST = Host()
STAND_IN = StandIn()


def get_device(name: str | None) -> Device:
    """``None``/"cpu", "cpu:proxy", or "cuda:N" (needs torch and that GPU)."""
    if name in (None, "cpu", "CPU:0", "cpu:0"):
        return HOST
    if name == StandIn.name:
        return STAND_IN
    if isinstance(name, str) and name.lower().startswith(("cuda:", "gpu:")):
        try:
            return Cuda(int(name.split(":", 1)[1]))
        except ImportError:
            raise InvalidArgumentError(f"device {name} needs torch, which is not installed") from None
        except ValueError:
            pass
    raise InvalidArgumentError(f"unknown device {name!r}: expected cpu, cpu:proxy or cuda:<index>")


def device_of(value: Any) -> Device:
    """The device ``value`` lives on: the stand-in for its arrays, else where DLPack says
    (numpy arrays, and whatever speaks no DLPack, are on the host)."""
    if isinstance(value, StandInArray):
        return STAND_IN
    if not is_tensor(value):
        return HOST
    kind, index = dlpack_device(value)
    if kind in (DL_CUDA, DL_CUDA_MANAGED):
        return Cuda(index)
    if kind not in HOST_TYPES:
        raise InvalidArgumentError(
            f"{type(value).__name__} lives on DLPack device type {kind}: tensorverbs moves "
            "tensors of the host and of CUDA GPUs")
    return HOST


def host_array(value: Any, device: Device) -> tuple[Any, bool]:
    """(the host array to send for ``value``, a tensor on ``device``, and whether a
    device-to-host copy was made); a host tensor speaking DLPack (torch, ...) is viewed, not
    copied."""
    if not device.dma:
        return device.to_host(value), True
    return (host_view(value) if is_tensor(value) else value), False
