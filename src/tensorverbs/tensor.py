"""Tensors as tensorverbs moves them: dtypes with TensorFlow's DataType numbers,
meta-data, the DMAable test, the TensorProto codec, and dead tensors.

DMAable tensors (every numeric dtype) travel as their raw bytes. String tensors (numpy
object arrays of ``bytes``/``str``, or ``S``/``U`` arrays) are not DMAable: they travel
as a serialized TensorProto, wire-compatible with TensorFlow's, and arrive as object
arrays of ``bytes`` (``str`` is sent UTF-8 encoded, as TensorFlow stores strings).
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping

import ml_dtypes
import numpy as np

from .errors import InvalidArgumentError
from .rpc import tensor_pb2

DT_STRING = tensor_pb2.DT_STRING
#: opaque bytes: what travels in place of a tensor passed by handle (:mod:`tensorverbs.ipc`)
DT_VARIANT = tensor_pb2.DT_VARIANT
#: the numpy dtype of DT_VARIANT bytes, distinct from every dtype a caller sends
VARIANT_DTYPE = np.dtype([("tensorverbs_variant", np.uint8)])

_NUMERIC: dict[np.dtype, int] = {
    np.dtype(np.float32): tensor_pb2.DT_FLOAT,
    np.dtype(np.float64): tensor_pb2.DT_DOUBLE,
    np.dtype(np.int32): tensor_pb2.DT_INT32,
    np.dtype(np.uint8): tensor_pb2.DT_UINT8,
    np.dtype(np.int16): tensor_pb2.DT_INT16,
    np.dtype(np.int8): tensor_pb2.DT_INT8,
    np.dtype(np.complex64): tensor_pb2.DT_COMPLEX64,
    np.dtype(np.int64): tensor_pb2.DT_INT64,
    np.dtype(np.bool_): tensor_pb2.DT_BOOL,
    np.dtype(ml_dtypes.bfloat16): tensor_pb2.DT_BFLOAT16,
    np.dtype(np.uint16): tensor_pb2.DT_UINT16,
    np.dtype(np.complex128): tensor_pb2.DT_COMPLEX128,
    np.dtype(np.float16): tensor_pb2.DT_HALF,
    np.dtype(np.uint32): tensor_pb2.DT_UINT32,
    np.dtype(np.uint64): tensor_pb2.DT_UINT64,
    np.dtype(ml_dtypes.float8_e5m2): tensor_pb2.DT_FLOAT8_E5M2,
    np.dtype(ml_dtypes.float8_e4m3fn): tensor_pb2.DT_FLOAT8_E4M3FN,
    np.dtype(ml_dtypes.float8_e4m3fnuz): tensor_pb2.DT_FLOAT8_E4M3FNUZ,
    np.dtype(ml_dtypes.float8_e4m3b11fnuz): tensor_pb2.DT_FLOAT8_E4M3B11FNUZ,
    np.dtype(ml_dtypes.float8_e5m2fnuz): tensor_pb2.DT_FLOAT8_E5M2FNUZ,
}
#: the numpy dtype of each numeric DataType, whose received bytes are the array itself
NUMERIC_BY_ENUM: Mapping[int, np.dtype] = MappingProxyType({v: k for k, v in _NUMERIC.items()})
_BY_ENUM: dict[int, np.dtype] = dict(NUMERIC_BY_ENUM)
#: the dtypes whose C-contiguous arrays a send takes as they are (native byte order)
_PREPARED = frozenset(NUMERIC_BY_ENUM.values())
_BY_ENUM[DT_STRING] = np.dtype(object)
_BY_ENUM[DT_VARIANT] = VARIANT_DTYPE

#: the largest rank a tensor may have (the RDMA message layout reserves room for this many)
MAX_RANK = 32


def dtype_enum(dtype: np.dtype) -> int:
    """TensorFlow's DataType number of a numpy dtype (object/S/U arrays are DT_STRING)."""
    if isinstance(dtype, np.dtype) and (enum := _NUMERIC.get(dtype)) is not None:
        return enum
    dtype = np.dtype(dtype)
    if dtype.kind in "OSU":
        return DT_STRING
    if dtype == VARIANT_DTYPE:
        return DT_VARIANT
    try:
        return _NUMERIC[dtype.newbyteorder("=") if dtype.byteorder == ">" else dtype]
    except KeyError:
        raise InvalidArgumentError(f"dtype {dtype} is not supported") from None


def numeric_dtype(dtype: Any) -> np.dtype:
    """``dtype`` (anything ``numpy.dtype`` takes) as a numpy dtype of a numeric DataType;
    InvalidArgumentError otherwise."""
    try:
        numeric: np.dtype = np.dtype(dtype)
    except TypeError:
        raise InvalidArgumentError(f"{dtype!r} is not a dtype") from None
    if dtype_enum(numeric) in (DT_STRING, DT_VARIANT):
        raise InvalidArgumentError(f"dtype {numeric} is not numeric")
    return numeric


def numpy_dtype(enum: int) -> np.dtype:
    """The numpy dtype of a DataType number; InvalidArgumentError for unknown numbers."""
    try:
        return _BY_ENUM[enum]
    except KeyError:
        raise InvalidArgumentError(f"unknown DataType {enum}") from None


def is_dmaable(enum: int) -> bool:
    """Whether tensors of this DataType can be copied as raw bytes (TensorFlow's CanMemCopy)."""
    return enum != DT_STRING


@dataclass(frozen=True, slots=True)
class TensorMeta:
    """What a receiver must know to allocate a result: DataType, shape, deadness and the
    byte count (raw bytes for DMAable tensors, TensorProto size otherwise)."""

    dtype: int
    shape: tuple[int, ...]
    is_dead: bool
    nbytes: int

    @property
    def dmaable(self) -> bool:
        return is_dmaable(self.dtype)

    def check(self) -> "TensorMeta":
        """Validate the fields against each other; InvalidArgumentError if they disagree."""
        np_dtype = numpy_dtype(self.dtype)
        check_shape(self.shape, np_dtype)
        if self.dmaable:
            expected = math.prod(self.shape) * np_dtype.itemsize
            if expected != self.nbytes:
                raise InvalidArgumentError(
                    f"tensor of {np_dtype} {self.shape} has {expected} bytes, not {self.nbytes}")
        return self


#: the most bytes numpy lets an array span (its dims other than zero times the item size)
LARGEST_ARRAY_BYTES = 2**63 - 1


def check_shape(shape: tuple[int, ...], dtype: np.dtype[Any]) -> None:
    """InvalidArgumentError unless a receiver can make an array of ``shape`` and ``dtype``: at
    most MAX_RANK dims, none negative, and within what numpy can hold (its bound ignores a
    zero dim: ``(0, 2**62, 2**62)`` is refused even empty)."""
    if len(shape) > MAX_RANK or any(d < 0 for d in shape):
        raise InvalidArgumentError(f"invalid tensor shape {shape}")
    if math.prod(d for d in shape if d) * dtype.itemsize > LARGEST_ARRAY_BYTES:
        raise InvalidArgumentError(
            f"tensor of {dtype} {shape} is larger than any array can be (2^63 - 1 bytes)")


def _check_list(value: list[Any] | tuple[Any, ...]) -> None:
    """InvalidArgumentError unless ``value`` holds, nested as numpy takes it, numbers only
    or strings only: numpy would stack the tensors of a list into one array (or fail on
    their unequal shapes) and turn numbers beside strings into strings."""
    kinds: set[str] = set()
    nested = [value]
    while nested:
        for item in nested.pop():
            if isinstance(item, (list, tuple)):
                nested.append(item)
                continue
            if isinstance(item, (str, bytes)):
                kinds.add("strings")
            elif isinstance(item, (numbers.Number, np.generic)):
                kinds.add("numbers")
            elif hasattr(item, "__array__") or hasattr(item, "__dlpack__"):
                raise InvalidArgumentError(
                    f"a {type(value).__name__} of tensors ({type(item).__name__}) is not one tensor: "
                    "send them under one name as tv.TensorList([...]), or each under its own name")
            else:
                raise InvalidArgumentError(
                    f"a {type(value).__name__} with an item of type {type(item).__name__} is not a "
                    "tensor: a list is sent as one tensor of its numbers, or of its strings")
            if len(kinds) > 1:
                raise InvalidArgumentError(
                    f"a {type(value).__name__} of numbers and strings is not a tensor: a list is "
                    "sent as one tensor of its numbers, or of its strings")


def prepare(value: Any) -> np.ndarray:
    """The array a send puts in the table: C-contiguous, of a supported dtype; strings as an
    object array of bytes. A list or tuple is one tensor of its numbers, or of its strings,
    as numpy makes it; one of tensors (or of anything else) is refused."""
    if type(value) is np.ndarray and value.dtype in _PREPARED and value.flags.c_contiguous:
        return value  # as it is (most sends)
    if isinstance(value, (list, tuple)):
        _check_list(value)
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as exc:  # ragged sequences and the like
        raise InvalidArgumentError(f"cannot make a tensor of {type(value).__name__}: {exc}") from None
    if array.dtype.kind in "OSU":
        flat = [v.encode() if isinstance(v, str) else v for v in array.reshape(-1).tolist()]
        if not all(isinstance(v, bytes) for v in flat):
            raise InvalidArgumentError("object arrays must hold only bytes or str")
        out = np.empty(array.shape, dtype=object)
        out.reshape(-1)[:] = flat if flat else []
        return out
    if dtype_enum(array.dtype) == DT_VARIANT:
        raise InvalidArgumentError(f"dtype {array.dtype} is not supported")
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("="))
    return array if array.flags.c_contiguous else array.copy(order="C")


def raw_bytes(array: np.ndarray) -> np.ndarray:
    """The bytes of a C-contiguous array as a 1-D uint8 view (no copy; any rank and dtype)."""
    return array.reshape(-1).view(np.uint8)


def meta_of(array: np.ndarray, is_dead: bool, proto_size: int = 0) -> TensorMeta:
    """Meta-data of a prepared array; ``proto_size`` is the encoded size of a string tensor."""
    enum = dtype_enum(array.dtype)
    nbytes = array.nbytes if is_dmaable(enum) else proto_size
    return TensorMeta(enum, tuple(array.shape), bool(is_dead), nbytes)


def encode_proto(array: np.ndarray) -> bytes:
    """Serialize a prepared array as a TensorProto (string_val for strings, tensor_content
    for the rest)."""
    proto = tensor_pb2.TensorProto(dtype=tensor_pb2.DataType.ValueType(dtype_enum(array.dtype)))
    proto.tensor_shape.dim.extend(tensor_pb2.TensorShapeProto.Dim(size=d) for d in array.shape)
    if array.dtype == object:
        proto.string_val.extend(array.reshape(-1).tolist())
    else:
        proto.tensor_content = array.tobytes()
    return bytes(proto.SerializeToString())


def decode_proto(data: bytes | memoryview | np.ndarray) -> np.ndarray:
    """Parse a TensorProto into an array; InvalidArgumentError if it is malformed."""
    proto = tensor_pb2.TensorProto()
    try:
        proto.ParseFromString(bytes(data))
    except Exception as exc:  # protobuf raises DecodeError and others
        raise InvalidArgumentError(f"malformed TensorProto: {exc}") from None
    shape = tuple(d.size for d in proto.tensor_shape.dim)
    dtype = numpy_dtype(proto.dtype)
    check_shape(shape, dtype)
    count = math.prod(shape)
    if dtype == object:
        if len(proto.string_val) != count:
            raise InvalidArgumentError(
                f"TensorProto of shape {shape} has {len(proto.string_val)} strings")
        out = np.empty(shape, dtype=object)
        out.reshape(-1)[:] = list(proto.string_val)
        return out
    if len(proto.tensor_content) != count * dtype.itemsize:
        raise InvalidArgumentError(f"TensorProto content does not match {dtype} {shape}")
    array: np.ndarray = np.frombuffer(proto.tensor_content, dtype=dtype).reshape(shape).copy()
    return array


class DeadTensor(np.ndarray):
    """The value of a dead tensor (sent with ``is_dead=True``): a normal array that
    :func:`is_dead` recognises. ``recv`` returns one instead of raising."""


def mark_dead(array: np.ndarray) -> DeadTensor:
    """``array`` as the value of a dead tensor (no copy)."""
    return array.view(DeadTensor)


def is_dead(value: Any) -> bool:
    """Whether a received value is a dead tensor (a :class:`DeadTensor`, or its torch
    counterpart when the recv returns torch tensors)."""
    return isinstance(value, DeadTensor) or getattr(type(value), "tensorverbs_dead", False) is True
