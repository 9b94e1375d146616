"""Control messages for the codec's tests: the seeds' layout as Python's struct reads it,
the fields as _core.encode_message takes them, and strategies that draw a valid message of
every type."""
from __future__ import annotations

import math
import struct
from typing import Any

from hypothesis import assume
from hypothesis import strategies as st

from tensorverbs import _core
from tensorverbs.errors import Code, TensorverbsError
from tensorverbs.rpc import tensor_pb2
from tensorverbs.tensor import DT_STRING, LARGEST_ARRAY_BYTES, MAX_RANK, numpy_dtype

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
            "error_message": "", "acked": 0, "payload": b"", "requests": [], "inlines": []}
#: a TENSOR_REQUESTS request's fixed fields: request_index, step_id, name_size
REQUEST = struct.Struct("<IqH")
#: a TENSOR_INLINES tensor's fixed fields: request_index, is_dead, data_type, rank, tensor_bytes
INLINE = struct.Struct("<IBiBQ")
#: the types whose header names no request: several travel in them
BATCHES = (MessageType.TENSOR_REQUESTS, MessageType.TENSOR_INLINES)


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
    # a shape an array can be made of (numpy's bound ignores a zero dim)
    assume(math.prod(d for d in shape if d) * numpy_dtype(dtype).itemsize <= LARGEST_ARRAY_BYTES)
    if dtype == DT_STRING:
        nbytes = draw(st.integers(0, U64))
    else:
        nbytes = math.prod(shape) * numpy_dtype(dtype).itemsize
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


def inlines_tail(inlines: list[tuple[int, tuple, bytes]]) -> bytes:
    """The tail of a TENSOR_INLINES message of ``inlines`` (index, meta, bytes)."""
    return b"".join(INLINE.pack(i, dead, dtype, len(shape), nbytes) + struct.pack(f"<{len(shape)}q", *shape)
                    + data for i, (dtype, shape, dead, nbytes), data in inlines)


@st.composite
def inline_lists(draw):
    """A TENSOR_INLINES message's tensors: at least one, as many as fit."""
    inlines = []
    for _ in range(draw(st.integers(1, 12))):
        dtype = draw(st.sampled_from(DTYPES))
        shape = draw(st.lists(st.integers(0, 4), max_size=4))
        nbytes = draw(st.integers(0, 64)) if dtype == DT_STRING else math.prod(shape) * numpy_dtype(dtype).itemsize
        meta = (dtype, shape, draw(st.booleans()), nbytes)
        inlines.append((draw(st.integers(0, _core.MAX_REQUEST_INDEX)), meta, draw(st.binary(min_size=nbytes,
                                                                                           max_size=nbytes))))
    while len(inlines_tail(inlines)) > _core.MAX_TAIL_BYTES:
        inlines.pop()
    return inlines


@st.composite
def messages(draw):
    mtype = draw(st.sampled_from(sorted(TYPES)))
    if mtype == MessageType.TENSOR_REQUESTS:  # nothing in the header beside the requests
        return message(mtype, 0, acked=draw(st.integers(0, (1 << 32) - 1)), requests=draw(request_lists()))
    if mtype == MessageType.TENSOR_INLINES:  # nor beside the tensors
        return message(mtype, 0, acked=draw(st.integers(0, (1 << 32) - 1)), inlines=draw(inline_lists()))
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
