"""The native control-message codec (tensorverbs._core): the seeds' fixed layout, a round
trip of every message type, error texts cut to fit a slot, and what cannot be encoded."""
from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings

from tensorverbs import _core
from tensorverbs.errors import Code
from tensorverbs.rpc import tensorverbs_pb2 as pb
from tensorverbs.tensor import DT_STRING, MAX_RANK

from message_cases import (FIELDS, HEADER, NAME_BYTES, TYPES, MessageType, decode, encode, inlines_tail, message,
                           messages, requests_tail)


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
        "RELEASE": 4, "CANCEL": 5, "TENSOR_INLINE": 6, "TENSOR_REQUESTS": 7, "TENSOR_INLINES": 8}


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
    elif msg["type"] == MessageType.TENSOR_INLINES:
        assert tail == inlines_tail(msg["inlines"])
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
    if mtype == MessageType.TENSOR_INLINES:
        msg = message(mtype, 0, acked=2, inlines=[(9, meta, bytes(range(8))), (3, (DT_STRING, [], True, 3), b"abc")])
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
    message(MessageType.TENSOR_INLINES, 0, inlines=[(1, (4, [4000], False, 4000), bytes(4000))] * 2),
], ids=["name", "rank", "payload-size", "payload-too-big", "requests", "inlines"])
def test_unencodable_messages_are_refused(msg):
    with pytest.raises(ValueError, match="does not fit"):
        encode(msg)
