"""A tensor as a stream of RecvTensorResponse messages, built and parsed without extra copies.

The first message carries the meta-data (and the whole tensor if it is small); each
following one is a ``chunk`` field
(protobuf field 2, length-delimited) holding the next bytes of the tensor (its raw bytes,
or a serialized TensorProto for non-DMAable tensors). Chunk messages are framed by hand,
wire-compatible with the generated class, so the sender copies each byte once (into the
message gRPC sends) and the receiver copies it once (from the received message into the
preallocated result, or the caller's ``out`` when the tensor fits it). The receiver
allocates only what it accepts: a tensor announced above its limit fails the recv before
any allocation.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, AsyncIterator, Callable

import numpy as np

from ..errors import DataLossError, InternalError, InvalidArgumentError, ResourceExhaustedError
from ..rendezvous.local import Value
from ..tensor import (
    TensorMeta, decode_proto, encode_proto, meta_of, numpy_dtype, raw_bytes,
)
from . import tensor_pb2
from . import tensorverbs_pb2 as pb

if TYPE_CHECKING:
    from ..out import Out

CHUNK_BYTES = 1 << 20
#: payloads up to this size travel inside the first message (one message per tensor)
INLINE_BYTES = 64 << 10
_CHUNK_TAG = 0x12  # field 2, wire type 2


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_meta(meta: TensorMeta, is_proto: bool, inline: bytes = b"") -> bytes:
    """The first RecvTensorResponse of a stream: meta-data, and a small tensor inline."""
    shape = tensor_pb2.TensorShapeProto(dim=[tensor_pb2.TensorShapeProto.Dim(size=d) for d in meta.shape])
    return pb.RecvTensorResponse(meta=pb.TensorMeta(
        dtype=meta.dtype, shape=shape, is_dead=meta.is_dead, tensor_bytes=meta.nbytes,
        is_proto=is_proto), chunk=inline).SerializeToString()


def tensor_messages(value: Value) -> tuple[int, AsyncIterator[bytes]]:
    """(payload bytes, the messages of ``value``)."""
    array = value.array
    proto = None if array.dtype != object else encode_proto(array)
    meta = meta_of(array, value.is_dead, len(proto) if proto is not None else 0)
    payload = raw_bytes(array) if proto is None else np.frombuffer(proto, np.uint8)

    async def messages() -> AsyncIterator[bytes]:
        if payload.size <= INLINE_BYTES:
            yield encode_meta(meta, proto is not None, payload.tobytes())
            return
        yield encode_meta(meta, proto is not None)
        for offset in range(0, payload.size, CHUNK_BYTES):
            part = payload[offset:offset + CHUNK_BYTES]
            yield b"".join((bytes((_CHUNK_TAG,)), _varint(part.size), part))
    return payload.size, messages()


def _meta(message: bytes) -> tuple[TensorMeta, bool, bytes]:
    try:
        first = pb.RecvTensorResponse.FromString(message)
    except Exception as exc:  # protobuf's DecodeError and friends
        raise InternalError(f"malformed RecvTensor response: {exc}") from None
    if not first.HasField("meta"):
        raise InternalError("RecvTensor response stream did not start with meta-data")
    m = first.meta
    meta = TensorMeta(m.dtype, tuple(d.size for d in m.shape.dim), m.is_dead, m.tensor_bytes)
    if not m.is_proto:
        try:
            meta.check()
        except InvalidArgumentError as exc:
            raise InternalError(f"bad meta-data in RecvTensor response: {exc.message}") from None
        if not meta.dmaable:  # its bytes would not say how large the result is
            raise InternalError("RecvTensor response announces a non-DMAable tensor as raw bytes")
    return meta, m.is_proto, first.chunk


def _chunk(message: bytes) -> tuple[int, int]:
    """(offset, length) of the payload inside a chunk message."""
    if not message or message[0] != _CHUNK_TAG:
        raise InternalError("RecvTensor response is not a chunk")
    length, shift, i = 0, 0, 1
    while True:
        if i >= len(message) or shift > 63:
            raise InternalError("truncated chunk header in RecvTensor response")
        byte = message[i]
        length |= (byte & 0x7F) << shift
        shift, i = shift + 7, i + 1
        if not byte & 0x80:
            break
    if i + length != len(message):
        raise InternalError("chunk length does not match the RecvTensor response size")
    return i, length


async def read_tensor(messages: AsyncIterator[bytes], limit: int,
                      started: Callable[[], None] = lambda: None,
                      out: "Out | None" = None) -> tuple[Value, int]:
    """(the value carried by a RecvTensor response stream, its payload bytes), read up to
    its last byte (the stream itself goes on until the receiver confirms); ``started`` is
    called when the first message is in. A payload announced above ``limit`` bytes
    raises ResourceExhaustedError before anything is allocated for it. A tensor that fits
    ``out`` is read straight into its landing."""
    it = messages.__aiter__()
    try:
        first = await it.__anext__()
    except StopAsyncIteration:
        raise InternalError("RecvTensor response stream was empty") from None
    started()
    meta, is_proto, inline = _meta(first)
    if meta.nbytes > limit:
        raise ResourceExhaustedError(
            f"the sender announced a tensor of {meta.nbytes} bytes, more than the {limit} "
            "this task accepts (TENSORVERBS_MAX_TENSOR_BYTES)")
    if is_proto:
        raw = np.empty(meta.nbytes, np.uint8)
        result = None
    elif out is not None and out.fits(meta.dtype, meta.shape):
        result = out.landing
        raw = raw_bytes(result)
    else:
        result = np.empty(meta.shape, numpy_dtype(meta.dtype))
        raw = raw_bytes(result)
    if len(inline) > raw.size:
        raise DataLossError(f"sender sent more than the {raw.size} bytes announced")
    raw[:len(inline)] = np.frombuffer(inline, np.uint8)
    filled = len(inline)
    while filled < raw.size:
        try:
            message = await it.__anext__()
        except StopAsyncIteration:
            raise DataLossError(f"stream ended after {filled} of {raw.size} bytes") from None
        start, length = _chunk(message)
        if filled + length > raw.size:
            raise DataLossError(f"sender streamed more than the {raw.size} bytes announced")
        raw[filled:filled + length] = np.frombuffer(message, np.uint8, length, start)
        filled += length
    if is_proto:
        result = decode_proto(raw)
    return Value(result, meta.is_dead), raw.size
