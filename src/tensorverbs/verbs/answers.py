"""The arrays the native core sends and answers with: an array in the form the core sends
it, and the array a recv's answer holds."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..tensor import (DT_STRING, DT_VARIANT, NUMERIC_BY_ENUM, VARIANT_DTYPE, decode_proto, dtype_enum, encode_proto,
                      numpy_dtype)


def wire(array: np.ndarray) -> tuple[int, Any]:
    """The DataType of a prepared array and the bytes the core sends of it (a TensorProto
    for strings)."""
    dtype = array.dtype
    if dtype.kind == "O":
        return DT_STRING, encode_proto(array)
    return dtype_enum(dtype), array


def plain_array(dtype: int, shape: tuple, is_dead: bool, payload: Any) -> np.ndarray | None:
    """The array of a numeric, live tensor the core answered with in its own bytes (the
    result as it is); None for any other answer (see :func:`answer_array`)."""
    plain = None if is_dead or isinstance(payload, np.ndarray) else NUMERIC_BY_ENUM.get(dtype)
    return None if plain is None else np.ndarray(shape, plain, payload)


def answer_array(dtype: int, shape: tuple, payload: Any) -> np.ndarray:
    """The array a recv's answer from the core holds (a descriptor's bytes for DT_VARIANT)."""
    if dtype == DT_STRING:
        return decode_proto(payload)
    if isinstance(payload, np.ndarray):
        return payload  # this task's own tensor, received locally
    if dtype == DT_VARIANT:
        return np.frombuffer(payload, VARIANT_DTYPE)
    return np.ndarray(shape, numpy_dtype(dtype), payload)
