"""The native control-message codec (tensorverbs._core): the seeds' fixed layout, a round
trip of every message type, error texts cut to fit a slot, and a verdict on any bytes:
the message, or an error with its reason, attributed to a request when the request index
and the type were readable (never for TENSOR_REQUESTS, which names several)."""
from __future__ import annotations

import math
import struct
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tensorverbs import _core
from tensorverbs.errors import Code, TensorverbsError
from tensorverbs.rpc import tensor_pb2
from tensorverbs.rpc import tensorverbs_pb2 as pb
from tensorverbs.tensor import DT_STRING, MAX_RANK, numpy_dtype

U64 = (1 << 64) - 1
NAME_BYTES = 512
MessageType = _core.MessageType
TYPES = {int(t) for t in MessageType.__members__.values()}
# the seeds' layout: TensorFlow's RdmaMessage fields, then tail_size and acked
HEADER = struct.Struct(f"<BH{NAME_BYTES}sqQQIBiB{MAX_RANK}qQII")
TAIL_SIZE = slice(HEADER.size - 8, HEADER.size - 4)
INDEX = slice(523, 531)
# (field, offset, format) of every header field after the type
FIELDS = [("name_size", 1, "<H"), ("name", 3, f"{NAME_BYTES}s"), ("step_id", 515, "<q"),
          ("request_index", 523, "<Q"), ("remote_addr", 531, "<Q"), ("rkey", 539, "<I"),
          ("is_dead", 543, "B"), ("data_type", 544, "<i"), ("rank", 548, "B"),
          ("dims", 549, f"<{MAX_RANK}q"), ("tensor_bytes", 805, "<Q"), ("tail_size", 813, "<I"),
          ("acked", 817, "<I")]


#: the fields of a message after its type and request index, as _core.encode_message takes
#: them and decode_message gives them back (meta: (dtype, shape as a list, is_dead, nbytes))
DEFAULTS = {"name": "", "step_id": 0, "remote_addr": 0, "rkey": 0, "meta": None, "error_code": 0,
            "error_message": "", "acked": 0, "payload": b"", "requests": []}
#: a TENSOR_REQUESTS request's fixed fields: request_index, step_id, name_size
REQUEST = struct.Struct("<IqH")


def message(mtype: int, request_index: int, **fields: Any) -> dict[str, Any]:
    return {"type": int(mtype), "request_index": request_index, **DEFAULTS, **fields}


def encode(msg: dict[str, Any]) -> bytes:
    return _core.encode_message(**msg)


def decode(data: bytes) -> dict[str, Any] | str:
    """The message, or the decoder's reason for refusing the bytes."""
    got = _core.decode_message(data)
    error = got.pop("error")
    return got if error is None else error


# ---------------------------------------------------------------------------- strategies
def _known(number: int) -> bool:
    try:
        numpy_dtype(number)
    except TensorverbsError:
        return False
    return True


DTYPES = sorted(n for n in tensor_pb2.DataType.values() if _known(n))
TEXT = st.characters(codec="utf-8")  # no lone surrogates: every str here can be encoded


@st.composite
def metas(draw):
    dtype = draw(st.sampled_from(DTYPES))
    small = st.integers(0, 4)
    shape = draw(st.lists(small | st.integers(0, 1 << 62), max_size=MAX_RANK))
    if dtype == DT_STRING:
        nbytes = draw(st.integers(0, U64))
    else:
        nbytes = math.prod(shape) * numpy_dtype(dtype).itemsize
        assume(nbytes <= U64)
    return dtype, shape, draw(st.booleans()), nbytes


names = (st.text(TEXT, max_size=200).filter(lambda s: len(s.encode()) <= NAME_BYTES)
         | st.integers(0, NAME_BYTES).map(lambda n: "n" * n))
# up to 1000 code points, at most 4000 bytes: every one fits a slot uncut
error_texts = (st.text(TEXT, max_size=40)
               | st.builds(lambda chunk, times: (chunk * times)[:1000],
                           st.text(TEXT, min_size=1, max_size=6), st.integers(0, 1000)))


def requests_tail(requests: list[tuple[int, int, str]]) -> bytes:
    """The tail of a TENSOR_REQUESTS message of ``requests`` (index, step_id, name)."""
    return b"".join(REQUEST.pack(i, step, len(name.encode())) + name.encode() for i, step, name in requests)


@st.composite
def request_lists(draw):
    """A TENSOR_REQUESTS message's requests: at least one, as many as fit."""
    entry = st.tuples(st.integers(0, _core.MAX_REQUEST_INDEX), st.integers(-(1 << 63), (1 << 63) - 1),
                      names.filter(bool))
    requests = draw(st.lists(entry, min_size=1, max_size=40))
    while len(requests_tail(requests)) > _core.MAX_TAIL_BYTES:
        requests.pop()
    return requests


@st.composite
def messages(draw):
    mtype = draw(st.sampled_from(sorted(TYPES)))
    if mtype == MessageType.TENSOR_REQUESTS:  # nothing in the header beside the requests
        return message(mtype, 0, acked=draw(st.integers(0, (1 << 32) - 1)), requests=draw(request_lists()))
    payload = b""
    if mtype == MessageType.TENSOR_INLINE:
        big = st.binary(min_size=_core.MAX_TAIL_BYTES - 8, max_size=_core.MAX_TAIL_BYTES)
        payload = draw(st.binary(max_size=64) | big)
        meta = (4, [len(payload)], draw(st.booleans()), len(payload))  # uint8
    else:
        meta = draw(metas() if mtype == MessageType.META_DATA_RESPONSE else st.none() | metas())
    name = draw(names)
    if mtype in (MessageType.TENSOR_REQUEST, MessageType.TENSOR_RE_REQUEST):
        assume(name)
    error = mtype == MessageType.ERROR_STATUS
    return message(
        mtype, draw(st.integers(0, _core.MAX_REQUEST_INDEX)), name=name,
        step_id=draw(st.integers(-(1 << 63), (1 << 63) - 1)), remote_addr=draw(st.integers(0, U64)),
        rkey=draw(st.integers(0, (1 << 32) - 1)), meta=meta,
        error_code=draw(st.integers(1, max(Code))) if error else 0,
        error_message=draw(error_texts) if error else "",
        acked=draw(st.integers(0, (1 << 32) - 1)), payload=payload)


# -------------------------------------------------------------------------------- layout
def test_build_info():
    info = _core.build_info()
    assert info["cxx_standard"] == "C++17"
    assert isinstance(info["ibverbs"], bool) and info["ibverbs_reason"]
    assert info["compiler"] and info["build_type"]


def test_constants_are_the_seeds_layout():
    assert _core.HEADER_BYTES == HEADER.size == 821
    assert _core.SLOT_BYTES == 8192
    assert _core.MAX_TAIL_BYTES == _core.SLOT_BYTES - _core.HEADER_BYTES
    assert (_core.IMM_MESSAGE, _core.IMM_ACK, _core.MAX_REQUEST_INDEX) == (0xFFFFFFFF, 0xFFFFFFFE, 0xFFFFFFFD)
    assert {name: int(t) for name, t in MessageType.__members__.items()} == {
        "META_DATA_RESPONSE": 0, "TENSOR_RE_REQUEST": 1, "TENSOR_REQUEST": 2, "ERROR_STATUS": 3,
        "RELEASE": 4, "CANCEL": 5, "TENSOR_INLINE": 6, "TENSOR_REQUESTS": 7}


def test_every_field_sits_at_its_offset():
    msg = message(MessageType.META_DATA_RESPONSE, 0x0102030405, name="w1", step_id=-3,
                  remote_addr=0xA1A2A3A4A5A6A7A8, rkey=0xB1B2B3B4, meta=(1, [2, 3], True, 24),
                  acked=0xC1C2C3C4)
    data = encode(msg)
    assert data[0] == MessageType.META_DATA_RESPONSE and len(data) == HEADER.size
    got = {field: struct.unpack_from(fmt, data, offset) for field, offset, fmt in FIELDS}
    assert got == {
        "name_size": (2,), "name": (b"w1".ljust(NAME_BYTES, b"\0"),), "step_id": (-3,),
        "request_index": (0x0102030405,), "remote_addr": (0xA1A2A3A4A5A6A7A8,),
        "rkey": (0xB1B2B3B4,), "is_dead": (1,), "data_type": (1,), "rank": (2,),
        "dims": (2, 3) + (0,) * (MAX_RANK - 2), "tensor_bytes": (24,), "tail_size": (0,),
        "acked": (0xC1C2C3C4,)}


@settings(max_examples=300)
@given(messages())
def test_every_message_is_the_seeds_struct(msg):
    data = encode(msg)
    mtype, name_size, name, step_id, index, addr, rkey, is_dead, dtype, rank, *rest = \
        HEADER.unpack_from(data)
    dims, (nbytes, tail_size, acked) = list(rest[:MAX_RANK]), rest[MAX_RANK:]
    raw = msg["name"].encode()
    assert (mtype, name_size, name, step_id, index, addr, rkey, acked) == (
        msg["type"], len(raw), raw.ljust(NAME_BYTES, b"\0"), msg["step_id"], msg["request_index"],
        msg["remote_addr"], msg["rkey"], msg["acked"])
    meta_dtype, shape, dead, meta_bytes = msg["meta"] or (0, [], False, 0)
    assert (dtype, is_dead, rank, dims, nbytes) == (
        meta_dtype, dead, len(shape), shape + [0] * (MAX_RANK - len(shape)), meta_bytes)
    tail = data[HEADER.size:]
    assert tail_size == len(tail)
    if msg["type"] == MessageType.ERROR_STATUS:
        error = pb.ErrorStatus(code=msg["error_code"], message=msg["error_message"])
        assert tail == error.SerializeToString()
    elif msg["type"] == MessageType.TENSOR_REQUESTS:
        assert tail == requests_tail(msg["requests"])
    else:
        assert tail == msg["payload"]


# ---------------------------------------------------------------------------- round trips
@settings(max_examples=400)
@given(messages())
def test_every_message_round_trips(msg):
    assert decode(encode(msg)) == msg


@pytest.mark.parametrize("mtype", sorted(TYPES))
def test_each_type_round_trips(mtype):
    meta = (1, [2], False, 8)
    msg = message(mtype, 9, name="t", step_id=4, remote_addr=5, rkey=6, meta=meta, acked=2)
    if mtype == MessageType.ERROR_STATUS:
        msg.update(error_code=int(Code.ABORTED), error_message="stopped")
    if mtype == MessageType.TENSOR_INLINE:
        msg["payload"] = bytes(range(8))
    if mtype == MessageType.TENSOR_REQUESTS:
        msg = message(mtype, 0, acked=2, requests=[(9, 4, "t"), (3, -1, "u")])
    assert decode(encode(msg)) == msg


def cut(code: int, text: str) -> bytes:
    """The ErrorStatus tail of ``code`` and ``text``: the text cut at a character boundary,
    "..." added, so that it fits a message slot."""
    error = pb.ErrorStatus(code=code, message=text).SerializeToString()
    if len(error) <= _core.MAX_TAIL_BYTES:
        return error
    raw = text.encode()
    keep = max(0, len(raw) - (len(error) - _core.MAX_TAIL_BYTES) - 3)
    return pb.ErrorStatus(code=code, message=raw[:keep].decode(errors="ignore") + "...").SerializeToString()


@pytest.mark.parametrize("text", [
    "a" * (_core.MAX_TAIL_BYTES - 5), "a" * (_core.MAX_TAIL_BYTES - 4), "a" * 100_000,
    "\u20ac" * 3000, "\U0001F600" * 3000, "\u20ac" * 3000 + "a", "\u00e9" * 4000, "x\u00e9" * 3000,
])
@pytest.mark.parametrize("code", [13, -1, 1 << 30])
def test_long_error_texts_are_cut_to_fit(text, code):
    data = encode(message(MessageType.ERROR_STATUS, 1, error_code=code, error_message=text))
    assert data[HEADER.size:] == cut(code, text) and len(data) <= _core.SLOT_BYTES
    if 0 < code <= max(Code):
        got = decode(data)
        assert text.startswith(got["error_message"].removesuffix("...")) and got["error_code"] == code


@pytest.mark.parametrize("msg", [
    message(MessageType.TENSOR_REQUEST, 1, name="n" * (NAME_BYTES + 1)),
    message(MessageType.TENSOR_REQUEST, 1, name="w", meta=(1, [1] * (MAX_RANK + 1), False, 4)),
    message(MessageType.TENSOR_INLINE, 1, meta=(4, [3], False, 3), payload=b"ab"),
    message(MessageType.TENSOR_INLINE, 1, meta=(4, [_core.SLOT_BYTES], False, _core.SLOT_BYTES),
            payload=bytes(_core.SLOT_BYTES)),
    message(MessageType.TENSOR_REQUESTS, 0, requests=[(1, 0, "t")] * (_core.MAX_TAIL_BYTES // 15 + 1)),
], ids=["name", "rank", "payload-size", "payload-too-big", "requests"])
def test_unencodable_messages_are_refused(msg):
    with pytest.raises(ValueError, match="does not fit"):
        encode(msg)


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
            and data[0] != MessageType.TENSOR_REQUESTS):
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
