"""torch beside numpy: the dtypes of one in the other, and torch tensors over numpy arrays
without a copy. numpy holds bfloat16 and the float8 types as ml_dtypes' dtypes, which
``torch.from_numpy`` refuses: they are viewed through an integer type of their size. Each
function imports torch only when it needs it."""
from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from .errors import InvalidArgumentError
from .tensor import numeric_dtype


def is_torch_dtype(dtype: Any) -> bool:
    """Whether ``dtype`` is a ``torch.dtype`` (without importing torch)."""
    return type(dtype).__module__ == "torch" and type(dtype).__name__ == "dtype"


def is_torch_tensor(value: Any) -> bool:
    """Whether ``value`` is a ``torch.Tensor`` (without importing torch)."""
    return any(cls.__module__ == "torch" and cls.__name__ == "Tensor" for cls in type(value).__mro__)


def import_torch() -> Any:
    """The torch module; InvalidArgumentError if it is not installed."""
    try:
        import torch
    except ImportError:
        raise InvalidArgumentError("torch results need torch, which is not installed") from None
    return torch


def torch_dtype_of(dtype: np.dtype) -> Any:
    """The torch dtype of numpy ``dtype`` (ml_dtypes' by name); None if torch lacks it."""
    torch = import_torch()
    found = getattr(torch, np.dtype(dtype).name, None) if np.dtype(dtype).kind not in "OSU" else None
    return found if isinstance(found, torch.dtype) else None


def numpy_dtype_of(dtype: Any) -> np.dtype | None:
    """The numpy dtype (ml_dtypes' for bfloat16 and float8) of torch ``dtype``; None if
    numpy has none (e.g. complex32)."""
    name = str(dtype).rsplit(".", 1)[-1]
    try:
        return numeric_dtype(name)
    except InvalidArgumentError:
        return None


def as_torch(array: np.ndarray) -> Any:
    """A torch tensor sharing ``array``'s memory (no copy); InvalidArgumentError naming the
    dtype if torch has none for it."""
    torch = import_torch()
    if array.dtype.kind in "OSU":
        raise InvalidArgumentError(
            "torch has no dtype for string tensors: receive them with tensor_type='numpy'")
    target = torch_dtype_of(array.dtype)
    if target is None:
        raise InvalidArgumentError(
            f"torch has no dtype for {array.dtype}: receive it with tensor_type='numpy' or cast it "
            "with dtype=")
    plain = np.asarray(array)  # a DeadTensor or other subclass as a plain array
    with warnings.catch_warnings():  # a read-only array: the tensor shares it as it is
        warnings.simplefilter("ignore", UserWarning)
        if array.dtype.kind == "V" or array.dtype.type.__module__ != "numpy":  # ml_dtypes
            return torch.from_numpy(plain.view(f"u{array.dtype.itemsize}")).view(target)
        return torch.from_numpy(plain)
