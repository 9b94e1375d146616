"""DeviceIpc: passing the tensors of one kind of device between processes by handle.

Each kind of device that can do it has one: CUDA GPUs (:mod:`.cuda_ipc`, CUDA IPC memory
handles through torch) and the ``cpu:proxy`` stand-in (:mod:`.stand_in_ipc`, files in the
host's shared memory), which runs the same protocol on machines without GPUs.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any

from ..devices import Device
from ..out import Out
from .descriptor import SharedTensorDescriptor


@dataclass
class Export:
    """A tensor exported by its sender: the handle (``blobs``, ``ints``), its meta-data
    and what keeps its memory alive until the receiver released it (``keep``)."""

    dtype: int
    shape: tuple[int, ...]
    blobs: tuple[bytes, ...]
    ints: tuple[int, ...]
    keep: Any


class DeviceIpc(abc.ABC):
    """Export, open and release tensors of one kind of device."""

    kind: int
    #: whether the process that exported a tensor can open it too (CUDA IPC cannot: a
    #: task sends such tensors to a task of its own process through host proxies)
    opens_own_exports = True

    @abc.abstractmethod
    def device_id(self, device: Device) -> str:
        """The host-wide name of ``device`` (a GPU's UUID), as :class:`HostRegistry` lists it."""

    @abc.abstractmethod
    def visible(self) -> set[str]:
        """The host-wide names of the devices of this kind this process sees."""

    @abc.abstractmethod
    def export(self, value: Any, device: Device) -> Export:
        """Export a copy of ``value``, a tensor on ``device`` (so the caller may change its
        tensor once sent, as with a host proxy)."""

    @abc.abstractmethod
    def release(self, export: Export, consumed: bool) -> None:
        """Free an export; ``consumed`` tells whether a receiver opened and released it."""

    @abc.abstractmethod
    def open(self, descriptor: SharedTensorDescriptor) -> Any:
        """The shared tensor, opened in this process (valid until it is dropped)."""

    @abc.abstractmethod
    def value(self, opened: Any, device: Device) -> Any:
        """A copy of the opened tensor on ``device`` (this kind's, or the host)."""

    @abc.abstractmethod
    def fill(self, opened: Any, out: Out) -> None:
        """Copy the opened tensor into ``out`` (which fits it), in place."""
