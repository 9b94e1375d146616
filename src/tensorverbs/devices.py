"""Devices a tensor can live on, and whether the verbs provider can reach their memory.

Host memory is reachable (DMAable). A GPU without GPUDirect RDMA is not: a tensor sent
from it is copied to host memory first, and a tensor received for it lands in a host
proxy buffer that is then copied to the GPU (the seeds' CPU proxy). ``cpu:proxy`` is a
stand-in for such a device that exists everywhere: plain heap memory the transport
treats as unreachable, so the proxy path runs (and is tested) on machines without GPUs.
"""
from __future__ import annotations

import abc
from typing import Any

import numpy as np

from .errors import InvalidArgumentError


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

    def __repr__(self) -> str:
        return f"<device {self.name}>"


class Host(Device):
    """Host memory: reachable by every provider."""

    name, dma = "cpu", True

    def from_host(self, array: np.ndarray) -> np.ndarray:
        return array

    def to_host(self, value: Any) -> np.ndarray:
        return np.asarray(value)


class StandInArray(np.ndarray):
    """An array on the ``cpu:proxy`` stand-in device."""


class StandIn(Device):
    """A device the transport treats as unreachable, backed by plain heap memory."""

    name, dma = "cpu:proxy", False

    def from_host(self, array: np.ndarray) -> StandInArray:
        return np.array(array, copy=True).view(StandInArray)

    def to_host(self, value: Any) -> np.ndarray:
        return np.array(value.view(np.ndarray), copy=True)


class Cuda(Device):
    """A CUDA GPU through torch, without GPUDirect RDMA (so always through the proxy)."""

    dma = False

    def __init__(self, index: int) -> None:
        import torch

        if not torch.cuda.is_available() or index >= torch.cuda.device_count():
            raise InvalidArgumentError(f"device cuda:{index} does not exist here")
        self.index, self.name = index, f"cuda:{index}"

    def from_host(self, array: np.ndarray) -> Any:
        import torch

        return torch.from_numpy(np.ascontiguousarray(array)).to(self.name)

    def to_host(self, value: Any) -> np.ndarray:
        return value.detach().cpu().numpy()


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
    """The device ``value`` lives on (numpy arrays and CPU torch tensors are on the host)."""
    if isinstance(value, StandInArray):
        return STAND_IN
    device = getattr(value, "device", None)
    if device is not None and getattr(device, "type", "cpu") == "cuda":
        return Cuda(device.index or 0)
    return HOST


def host_array(value: Any) -> tuple[Any, bool]:
    """(the host array to send for ``value``, whether a device-to-host copy was made)."""
    device = device_of(value)
    if not device.dma:
        return device.to_host(value), True
    if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
        return value.detach().numpy(), False  # a CPU torch tensor: a view, no copy
    return value, False
