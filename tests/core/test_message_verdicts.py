"""The codec's verdict on any bytes (tensorverbs._core.decode_message): the message, or an
error with its reason, attributed to a request when the request index and the type were
readable (never for TENSOR_REQUESTS or TENSOR_INLINES, which name several)."""
from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorverbs import _core
from tensorverbs.errors import Code
from tensorverbs.rpc import tensorverbs_pb2 as pb
from tensorverbs.tensor import MAX_RANK

from message_cases import (BATCHES, FIELDS, HEADER, INDEX, NAME_BYTES, TAIL_SIZE, TEXT, TYPES, U64, MessageType,
                           decode, encode, message, messages)


# ------------------------------------------------------------------------------- verdicts
def check_verdict(data: bytes) -> None:
    """Any bytes: a message that encodes back to them (an ERROR_STATUS: with a valid code),
    or a reason, attributed exactly when the header's type and request index are valid."""
    got = decode(data)
    if isinstance(got, dict):
        if got["type"] == MessageType.ERROR_STATUS:
            assert 0 < got["error_code"] <= max(Code)
        elif len(data) <= _core.SLOT_BYTES:
            assert encode(got) == data
        return
    assert got, "an error without a reason"
    verdict = _core.decode_message(data)
    index = struct.unpack("<Q", data[INDEX])[0] if len(data) >= HEADER.size else None
    if (index is not None and data[0] in TYPES and index <= _core.MAX_REQUEST_INDEX
            and data[0] not in BATCHES):
        assert (verdict["request_index"], verdict["type"]) == (index, data[0])
    else:
        assert (verdict["request_index"], verdict["type"]) == (None, None)


def _mutated(field: str, value: int, mtype: int = MessageType.TENSOR_REQUEST, tail: bytes = b"") -> bytes:
    """A valid message with ``tail`` added and ``field`` overwritten with ``value``."""
    data = bytearray(encode(message(mtype, 7, name="w")) + tail)
    offset, fmt = {name: (o, f) for name, o, f in [("type", 0, "B"), *FIELDS]}[field]
    struct.pack_into(fmt, data, offset, value)
    return bytes(data)


@pytest.mark.parametrize("data, reason, attributed", [
    (b"x" * 10, "message of 10 bytes is shorter than the 821-byte header", False),
    (_mutated("type", 9), "bad type-9 message: unknown type", False),
    (_mutated("request_index", 0xFFFFFFFE),
     "bad TENSOR_REQUEST message: request index 0xfffffffe is out of range", False),
    (_mutated("name_size", 513), "bad TENSOR_REQUEST message: name_size 513 > 512", True),
    (_mutated("name_size", 0), "bad TENSOR_REQUEST message: bytes after the tensor name", True),
    (_mutated("tail_size", 2, MessageType.RELEASE, b"xx"), "bad RELEASE message: a tail of 2 bytes", True),
    (_mutated("tail_size", 1), "bad TENSOR_REQUEST message: 821 bytes for a message of 822", True),
])
def test_malformed_messages_say_why(data, reason, attributed):
    verdict = _core.decode_message(data)
    assert verdict["error"] == reason
    assert (verdict["request_index"] is not None) == attributed
    check_verdict(data)


@st.composite
def field_writes(draw):
    _, offset, fmt = draw(st.sampled_from([f for f in FIELDS if f[0] not in ("name", "dims")]))
    if draw(st.booleans()):  # one dimension
        offset, fmt = 549 + 8 * draw(st.integers(0, MAX_RANK - 1)), "<q"
    bits = 8 * struct.calcsize(fmt)
    lo, hi = (-(1 << bits - 1), (1 << bits - 1) - 1) if fmt[-1].islower() else (0, (1 << bits) - 1)
    special = [0, 1, 2, lo, hi, MAX_RANK, MAX_RANK + 1, NAME_BYTES, NAME_BYTES + 1,
               _core.MAX_REQUEST_INDEX, _core.MAX_REQUEST_INDEX + 1, _core.MAX_TAIL_BYTES]
    value = draw(st.sampled_from([v for v in special if lo <= v <= hi]) | st.integers(lo, hi))
    return offset, struct.pack(fmt, value)


@settings(max_examples=800)
@given(messages(), st.lists(field_writes(), max_size=3),
       st.lists(st.tuples(st.integers(0, _core.SLOT_BYTES), st.integers(0, 255)), max_size=3),
       st.just(0) | st.integers(-8, 8), st.booleans())
def test_mutated_messages_get_a_verdict(msg, writes, flips, resize, fix_size):
    data = bytearray(encode(msg))
    for offset, raw in writes:
        data[offset:offset + len(raw)] = raw
    for pos, value in flips:
        if pos < len(data):
            data[pos] = value
    data = data[:max(0, len(data) + resize)] if resize < 0 else data + bytes(resize)
    if fix_size and len(data) >= HEADER.size:  # tail_size agrees with the length
        data[TAIL_SIZE] = struct.pack("<I", len(data) - HEADER.size)
    check_verdict(bytes(data))


@settings(max_examples=200)
@given(st.binary(max_size=_core.SLOT_BYTES))
def test_random_bytes_get_a_verdict(data):
    check_verdict(data)


def varint(value: int, padding: int = 0) -> bytes:
    """``value`` as a varint, with ``padding`` redundant bytes (as some encoders write)."""
    out = bytearray()
    while True:
        out.append(value & 0x7F)
        value >>= 7
        if not value:
            break
        out[-1] |= 0x80
    for _ in range(padding):
        out[-1] |= 0x80
        out.append(0)
    return bytes(out)


def mostly(usual, *rare):
    """``usual`` (a list: any of them) about four times in five, else one of ``rare``."""
    return st.sampled_from(list(usual) * 4 * max(1, len(rare) // len(usual)) + list(rare))


padding = mostly([0], 1, 4, 5, 9)


def wire_fields(depth: int = 0):
    """Protobuf fields, well-formed or not: any wire type, unknown and known numbers,
    groups, long varints, text and raw bytes."""
    return st.lists(wire_field(depth), max_size=4).map(b"".join)


@st.composite
def wire_field(draw, depth):
    number = draw(mostly([1, 2, 3, 16], 0, 15, (1 << 29) - 1))
    wire = draw(mostly([0, 1, 2, 3, 5], 4, 6, 7))
    tag = varint(number << 3 | wire, draw(padding))
    if wire == 0:
        return tag + varint(draw(st.integers(0, U64)), draw(padding))
    if wire in (1, 5):
        return tag + draw(st.binary(min_size=8 if wire == 1 else 4, max_size=8 if wire == 1 else 4))
    if wire == 2:
        text = st.text(TEXT, max_size=12).map(str.encode)
        payload = draw(text | text | st.binary(max_size=12))
        size = len(payload) + draw(mostly([0], 1, -1, 60))
        return tag + varint(max(0, size), draw(padding)) + payload
    if wire == 3:
        inner = draw(wire_fields(depth + 1)) if depth < 3 else b""
        end = draw(mostly([number], 0, number + 1))
        return tag + inner + varint(end << 3 | 4)
    return tag


def _error_status(code: int, proto: bytes) -> bytes:
    """An ERROR_STATUS message whose tail is ``proto``."""
    data = bytearray(encode(message(MessageType.ERROR_STATUS, 5, error_code=code)))
    data[TAIL_SIZE] = struct.pack("<I", len(proto))
    return bytes(data[:HEADER.size] + proto)


@settings(max_examples=600)
@given(st.integers(1, 16), wire_fields(), mostly([0], -1, -2))
def test_error_status_protos_get_a_verdict(code, fields, cut_bytes):
    proto = pb.ErrorStatus(code=code).SerializeToString() + fields
    data = _error_status(code, proto[:len(proto) + cut_bytes] if cut_bytes else proto)
    check_verdict(data)
    got = decode(data)
    if isinstance(got, dict):  # what protobuf reads from the tail, the core reads too
        expected = pb.ErrorStatus.FromString(data[HEADER.size:])
        assert (got["error_code"], got["error_message"]) == (expected.code, expected.message)


@pytest.mark.parametrize("depth", [99, 100, 101])
def test_nested_groups_get_a_verdict(depth):
    proto = pb.ErrorStatus(code=3).SerializeToString() + b"\x1b" * depth + b"\x1c" * depth  # field 3
    check_verdict(_error_status(3, proto))
