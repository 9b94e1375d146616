"""SharedTensorDescriptor: what travels in place of a tensor passed by handle. Its bytes
come from a peer: every malformed input is a DataLossError, never another exception."""
from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tensorverbs as tv
from tensorverbs.ipc.descriptor import CUDA, STAND_IN, SharedTensorDescriptor, is_descriptor
from tensorverbs.tensor import DT_STRING, DT_VARIANT, VARIANT_DTYPE, dtype_enum

DTYPES = [dtype_enum(np.dtype(d)) for d in ("float32", "int64", "uint8", "bool", "float16", "complex128")]

descriptors = st.builds(
    SharedTensorDescriptor,
    kind=st.sampled_from([CUDA, STAND_IN]),
    dtype=st.sampled_from(DTYPES),
    shape=st.lists(st.integers(0, 64), max_size=6).map(tuple),
    incarnation=st.integers(0, (1 << 64) - 1),
    export_id=st.integers(0, (1 << 64) - 1),
    device=st.text(max_size=60).filter(lambda s: len(s.encode()) < 256),
    blobs=st.lists(st.binary(max_size=100), max_size=8).map(tuple),
    ints=st.lists(st.integers(0, (1 << 64) - 1), max_size=16).map(tuple),
)


@given(descriptors)
def test_round_trip(descriptor):
    data = descriptor.encode()
    assert data.dtype == VARIANT_DTYPE and data.ndim == 1 and is_descriptor(data)
    assert SharedTensorDescriptor.decode(data) == descriptor


@given(descriptors, st.data())
def test_every_cut_is_refused(descriptor, data):
    raw = descriptor.encode().tobytes()
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(tv.DataLossError):
        SharedTensorDescriptor.decode(raw[:cut])
    with pytest.raises(tv.DataLossError, match="past its end"):
        SharedTensorDescriptor.decode(raw + b"\0")


@given(st.binary(max_size=400))
def test_random_bytes_are_refused_cleanly(raw):
    try:
        SharedTensorDescriptor.decode(raw)
    except tv.DataLossError:
        pass


@given(descriptors, st.data())
def test_flipped_bytes_decode_or_are_refused(descriptor, data):
    raw = bytearray(descriptor.encode().tobytes())
    at = data.draw(st.integers(0, len(raw) - 1))
    raw[at] ^= data.draw(st.integers(1, 255))
    try:
        decoded = SharedTensorDescriptor.decode(bytes(raw))
    except tv.DataLossError:
        return
    assert len(decoded.shape) <= 32 and all(d >= 0 for d in decoded.shape)


def _head(kind=CUDA, dtype=1, rank=0, magic=b"TVSH", version=1) -> bytes:
    return struct.pack("<4sBBiB", magic, version, kind, dtype, rank)


@pytest.mark.parametrize("head, match", [
    (_head(magic=b"XXXX"), "not a shared tensor descriptor"),
    (_head(version=9), "not a shared tensor descriptor"),
    (_head(kind=7), "unknown kind 7"),
    (_head(dtype=DT_STRING), "never shared"),
    (_head(dtype=DT_VARIANT), "never shared"),
    (_head(dtype=99), "unknown DataType 99"),
    (_head(rank=33), "rank 33"),
    (_head(rank=1) + struct.pack("<q", -4), "invalid shape"),
    (_head(rank=2) + struct.pack("<qq", 1 << 40, 1 << 40), "invalid shape"),
])
def test_bad_fields_are_named(head, match):
    with pytest.raises(tv.DataLossError, match=match):
        SharedTensorDescriptor.decode(head + bytes(64))


def test_a_caller_cannot_send_descriptor_bytes():
    with pytest.raises(tv.InvalidArgumentError, match="not supported"):
        tv.tensor.prepare(np.zeros(4, VARIANT_DTYPE))
