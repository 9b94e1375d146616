"""A relay's descriptor comes from a peer: it round-trips, and anything else (truncated,
mutated, random bytes, a part count its tensor cannot have) is DataLossError, never another
exception. And the parts a large tensor is relayed in cover it exactly, aligned."""
from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tensorverbs.errors import DataLossError
from tensorverbs.rendezvous.relay_plan import (MAX_PARTS, PART_ALIGN, PART_BYTES, PREFIX, RelayDescriptor,
                                               part_count, part_ranges)
from tensorverbs.tensor import VARIANT_DTYPE, dtype_enum

TASK = "/job:worker/replica:0/task:1"
DESCRIPTOR = RelayDescriptor(f"{PREFIX}1f:7", dtype_enum(np.dtype(np.float32)), (4096, 1024), TASK,
                             (TASK.replace("1", "2"), TASK.replace("1", "3")), 4)


def _bytes(descriptor: RelayDescriptor) -> bytes:
    return descriptor.encode().tobytes()


def _decode(raw: bytes) -> RelayDescriptor:
    return RelayDescriptor.decode(np.frombuffer(raw, VARIANT_DTYPE))


@given(st.sampled_from([np.uint8, np.float16, np.float32, np.int64, np.complex128]),
       st.lists(st.integers(0, 1 << 12), max_size=4), st.integers(0, 16), st.booleans(), st.booleans(),
       st.booleans())
def test_a_descriptor_round_trips(dtype, shape, children, late, served, gone):
    nbytes = np.dtype(dtype).itemsize * int(np.prod(shape))
    descriptor = RelayDescriptor(f"{PREFIX}a:{len(shape)}", dtype_enum(np.dtype(dtype)), tuple(shape), TASK,
                                 tuple(f"/job:w/replica:0/task:{i}" for i in range(children)), part_count(nbytes),
                                 late, served, gone)
    assert _decode(_bytes(descriptor)) == descriptor


@given(st.data())
def test_a_mutated_or_truncated_descriptor_is_data_loss_or_a_descriptor(data):
    raw = bytearray(_bytes(DESCRIPTOR))
    if data.draw(st.booleans()):
        del raw[data.draw(st.integers(0, len(raw) - 1)):]
    for _ in range(data.draw(st.integers(1, 4))):
        if raw:
            raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    try:
        got = _decode(bytes(raw))
    except DataLossError:
        return
    assert 1 <= got.parts <= MAX_PARTS and got.tag.startswith(PREFIX)


@given(st.binary(max_size=256))
def test_random_bytes_are_data_loss(raw):
    with pytest.raises(DataLossError):
        _decode(raw)


@pytest.mark.parametrize("parts", [0, MAX_PARTS + 1, 1025])
def test_a_part_count_out_of_bounds_is_refused(parts):
    raw = bytearray(_bytes(DESCRIPTOR))
    struct.pack_into("<H", raw, 10, parts)  # after magic, version, dtype and rank
    with pytest.raises(DataLossError, match="parts"):
        _decode(bytes(raw))


def test_more_parts_than_the_tensor_has_pages_is_refused():
    small = RelayDescriptor(f"{PREFIX}1:1", dtype_enum(np.dtype(np.uint8)), (3 * PART_ALIGN - 1,), TASK, (), 3)
    with pytest.raises(DataLossError, match="3 parts"):
        _decode(_bytes(small))


@given(st.integers(0, 1 << 34))
def test_parts_cover_the_tensor_in_order_each_aligned_and_at_least_a_part_long(nbytes):
    count = part_count(nbytes)
    ranges = part_ranges(nbytes, count)
    assert ranges[0][0] == 0 and ranges[-1][1] == nbytes
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    assert all(start % PART_ALIGN == 0 for start, _ in ranges)
    assert count == 1 or (count <= MAX_PARTS and all(end - start >= PART_BYTES - 2 * PART_ALIGN for start, end in ranges))
