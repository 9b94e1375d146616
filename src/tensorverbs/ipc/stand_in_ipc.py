"""StandInIpc: the ``cpu:proxy`` stand-in's tensors passed by handle, a file each in the
user's directory of the host's shared memory. It runs the protocol of CUDA IPC (export,
descriptor, open, copy out, release) where no GPU exists."""
from __future__ import annotations

import os
import pathlib
import re
import secrets
from typing import Any

import numpy as np

from ..devices import STAND_IN, Device, StandInArray
from ..errors import DataLossError, NotFoundError
from ..out import Out
from ..tensor import dtype_enum, numpy_dtype
from .descriptor import STAND_IN as KIND, SharedTensorDescriptor
from .device_ipc import DeviceIpc, Export

#: the host-wide name of the stand-in device, which every process of the host sees
DEVICE_ID = "cpu:proxy"
_NAME = re.compile(rb"tensor-[0-9a-f]{32}")


class StandInIpc(DeviceIpc):
    """Stand-in tensors as files of ``directory`` (the host registry's)."""

    kind = KIND

    def __init__(self, directory: pathlib.Path) -> None:
        self.directory = directory

    def device_id(self, device: Device) -> str:
        return DEVICE_ID

    def visible(self) -> set[str]:
        return {DEVICE_ID}

    def export(self, value: Any, device: Device) -> Export:
        array = np.ascontiguousarray(value.view(np.ndarray))
        name = f"tensor-{secrets.token_hex(16)}"
        path = self.directory / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as file:
            file.write(array.reshape(-1).view(np.uint8).data)
        return Export(dtype_enum(array.dtype), tuple(array.shape), (name.encode(),), (), path)

    def release(self, export: Export, consumed: bool) -> None:
        export.keep.unlink(missing_ok=True)

    def open(self, descriptor: SharedTensorDescriptor) -> np.ndarray:
        if len(descriptor.blobs) != 1 or descriptor.ints or not _NAME.fullmatch(descriptor.blobs[0]):
            raise DataLossError("stand-in shared tensor descriptor without a valid file name")
        path = self.directory / descriptor.blobs[0].decode()
        dtype = numpy_dtype(descriptor.dtype)
        try:
            with open(path, "rb") as file:
                data = np.fromfile(file, np.uint8, descriptor.nbytes + 1)
        except FileNotFoundError:
            raise NotFoundError(f"shared tensor {path.name} is gone (its step was cleaned up?)") from None
        if data.size != descriptor.nbytes:
            raise DataLossError(f"shared tensor {path.name} has {data.size} bytes, "
                                f"its descriptor says {descriptor.nbytes}")
        return data.view(dtype).reshape(descriptor.shape)

    def value(self, opened: np.ndarray, device: Device) -> Any:
        return opened.view(StandInArray) if device is STAND_IN else device.from_host(opened)

    def fill(self, opened: np.ndarray, out: Out) -> None:
        if out.device is STAND_IN:
            np.copyto(out.target.view(np.ndarray), opened)
        else:
            np.copyto(out.landing, opened)
            out.device.store(out.target, out.landing)
