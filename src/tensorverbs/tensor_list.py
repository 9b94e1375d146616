"""TensorList: several tensors under one rendezvous key, moved as one tensor (one request,
one completion, one SendHandle), such as a parameter group or a set of KV-cache pages.

The sender packs the list into one buffer (one copy of each tensor), sent as DT_VARIANT
bytes under the key; the receiver gets a Python list of arrays that view the one buffer it
received (no copy). The bytes come from a peer, so :func:`unpack` checks every field and
length before it makes a view; malformed input raises DataLossError.

Layout (little-endian): magic ``TVLS``, version u8, count u32, then per tensor its
DataType i32, rank u8, rank dims i64, and the offset and byte length (u64 each) of its
bytes; the bytes follow, each at an offset that is a multiple of ALIGN.
"""
from __future__ import annotations

import math
import struct
from typing import Any, Iterable, cast

import numpy as np

from .devices import HOST, device_of
from .dlpack import host_view, is_tensor
from .errors import DataLossError, InvalidArgumentError
from .tensor import DT_STRING, DT_VARIANT, MAX_RANK, VARIANT_DTYPE, dtype_enum, numpy_dtype, prepare

MAGIC = b"TVLS"
VERSION = 1
#: where each tensor's bytes start: a multiple of this (a cache line; any dtype's alignment)
ALIGN = 64
#: the most tensors one list may hold
MAX_TENSORS = 1 << 20

_HEAD = struct.Struct("<4sBI")
_ENTRY = struct.Struct("<iB")
_SPAN = struct.Struct("<QQ")


class TensorList:
    """Tensors to send as one (``Server.send(name, tv.TensorList([...]), to)``): numpy
    arrays or host tensors speaking DLPack (torch CPU tensors), numeric, of any shapes and
    dtypes. Its receiver gets a list of arrays in the same order (or torch tensors, as
    the recv asks)."""

    def __init__(self, tensors: Iterable[Any]) -> None:
        try:
            items = list(tensors)
        except TypeError:
            raise InvalidArgumentError(f"a TensorList takes a list of tensors, not {type(tensors).__name__}") from None
        if len(items) > MAX_TENSORS:
            raise InvalidArgumentError(f"a TensorList holds at most {MAX_TENSORS} tensors, not {len(items)}")
        self.arrays = [_host(t, i) for i, t in enumerate(items)]

    def __len__(self) -> int:
        return len(self.arrays)

    def pack(self) -> "Packed":
        """The list as DT_VARIANT bytes (a 1-D array of VARIANT_DTYPE)."""
        header = [_HEAD.pack(MAGIC, VERSION, len(self.arrays))]
        size = _HEAD.size + sum(_ENTRY.size + 8 * a.ndim + _SPAN.size for a in self.arrays)
        offsets = []
        at = _aligned(size)
        for a in self.arrays:
            offsets.append(at)
            at = _aligned(at + a.nbytes)
        for a, offset in zip(self.arrays, offsets):
            header.append(_ENTRY.pack(dtype_enum(a.dtype), a.ndim) + struct.pack(f"<{a.ndim}q", *a.shape)
                          + _SPAN.pack(offset, a.nbytes))
        packed = np.zeros(max(at, size), np.uint8)
        head = b"".join(header)
        packed[:len(head)] = np.frombuffer(head, np.uint8)
        for a, offset in zip(self.arrays, offsets):
            packed[offset:offset + a.nbytes] = a.reshape(-1).view(np.uint8)
        return packed.view(VARIANT_DTYPE).view(Packed)


class Packed(np.ndarray):
    """A TensorList packed to be sent (DT_VARIANT bytes, which a caller's array never is)."""


def is_packed(array: np.ndarray) -> bool:
    """Whether a received array is a packed TensorList."""
    return (array.dtype == VARIANT_DTYPE and array.size >= _HEAD.size
            and array[:4].view(np.uint8).tobytes() == MAGIC)


def unpack(array: np.ndarray) -> list[np.ndarray]:
    """The arrays of a packed TensorList (views of ``array``); DataLossError if malformed."""
    raw = array.view(np.ndarray).reshape(-1).view(np.uint8)  # plain arrays, even of a Packed
    end = raw.size
    at = 0

    def take(layout: struct.Struct) -> tuple[Any, ...]:
        nonlocal at
        if at + layout.size > end:
            raise DataLossError(f"a TensorList's header ends early ({end} bytes)")
        fields = layout.unpack_from(cast(Any, raw), at)  # numpy's stubs lack its buffer protocol
        at += layout.size
        return fields

    magic, version, count = take(_HEAD)
    if magic != MAGIC or version != VERSION:
        raise DataLossError(f"not a TensorList (magic {magic!r}, version {version})")
    if count > MAX_TENSORS:
        raise DataLossError(f"a TensorList of {count} tensors (at most {MAX_TENSORS})")
    out = []
    for i in range(count):
        dtype, rank = take(_ENTRY)
        if rank > MAX_RANK:
            raise DataLossError(f"tensor {i} of a TensorList has rank {rank} (at most {MAX_RANK})")
        shape = take(struct.Struct(f"<{rank}q"))
        offset, nbytes = take(_SPAN)
        if dtype in (DT_STRING, DT_VARIANT):
            raise DataLossError(f"tensor {i} of a TensorList has DataType {dtype}, which a list never holds")
        try:
            np_dtype = numpy_dtype(dtype)
        except InvalidArgumentError:
            raise DataLossError(f"tensor {i} of a TensorList has unknown DataType {dtype}") from None
        if any(d < 0 for d in shape) or math.prod(shape) * np_dtype.itemsize != nbytes:
            raise DataLossError(f"tensor {i} of a TensorList: shape {shape} disagrees with its {nbytes} bytes")
        if offset % ALIGN or offset > end or nbytes > end - offset:
            raise DataLossError(f"tensor {i} of a TensorList lies outside its {end} bytes")
        out.append(raw[offset:offset + nbytes].view(np_dtype).reshape(shape))
    return out


def _host(value: Any, i: int) -> np.ndarray:
    if device_of(value) is not HOST:
        raise InvalidArgumentError(f"tensor {i} of a TensorList is not a host tensor (send device tensors one by one)")
    array = prepare(host_view(value) if is_tensor(value) else value)  # C-contiguous, native order
    if array.dtype.kind in "OSU" or dtype_enum(array.dtype) in (DT_STRING, DT_VARIANT):
        raise InvalidArgumentError(f"tensor {i} of a TensorList is not numeric ({array.dtype})")
    return array


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN
