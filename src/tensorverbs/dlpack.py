"""Tensors of other libraries as numpy arrays, through DLPack, without copies.

Anything with ``__dlpack__`` (numpy, torch, JAX, CuPy, ...) is accepted where tensorverbs
takes a tensor. :func:`host_view` is the numpy array sharing a host tensor's memory;
:func:`dlpack_device` says where a tensor lives. Received arrays are numpy arrays, which
export DLPack themselves: ``torch.from_dlpack(x)`` shares their memory.
"""
from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from .errors import InvalidArgumentError

#: DLPack's device types (DLDeviceType) tensorverbs tells apart
DL_CPU, DL_CUDA, DL_CUDA_HOST, DL_CUDA_MANAGED = 1, 2, 3, 13
#: device types whose memory the host reads and writes directly
HOST_TYPES = (DL_CPU, DL_CUDA_HOST)


def is_tensor(value: Any) -> bool:
    """Whether ``value`` speaks DLPack (and is not already a numpy array)."""
    return hasattr(value, "__dlpack__") and not isinstance(value, np.ndarray)


def dlpack_device(value: Any) -> tuple[int, int]:
    """(DLPack device type, device index) of a tensor speaking DLPack."""
    try:
        kind, index = value.__dlpack_device__()
    except (AttributeError, TypeError, ValueError) as exc:
        raise InvalidArgumentError(
            f"{type(value).__name__} has __dlpack__ but no usable __dlpack_device__: {exc}") from None
    return int(kind), int(index)


def host_view(value: Any) -> np.ndarray:
    """The numpy array sharing the memory of ``value``, a host tensor speaking DLPack.

    A torch tensor that requires grad is viewed through ``detach()`` (same memory), and a
    bfloat16 or float8 one (types DLPack's numpy importer lacks) as ml_dtypes' type.
    """
    if getattr(value, "requires_grad", False):
        value = value.detach()
    ml_dtype = _torch_ml_dtype(value)
    if ml_dtype is not None:
        import torch

        bits = torch.int16 if ml_dtype.itemsize == 2 else torch.uint8
        return np.from_dlpack(value.view(bits)).view(ml_dtype)
    try:
        return np.from_dlpack(value)
    except (BufferError, RuntimeError, TypeError, ValueError) as exc:
        raise InvalidArgumentError(f"cannot view {type(value).__name__} through DLPack: {exc}") from None


def _torch_ml_dtype(value: Any) -> np.dtype | None:
    """The ml_dtypes dtype of a torch tensor of bfloat16 or a float8 type; None otherwise."""
    dtype = getattr(value, "dtype", None)
    if dtype is None or type(dtype).__module__ != "torch":
        return None
    name = str(dtype).rsplit(".", 1)[-1]
    if name != "bfloat16" and not name.startswith("float8_"):
        return None
    found = getattr(ml_dtypes, name, None)
    return np.dtype(found) if found is not None else None
