"""Frame layouts of the stream between two queue pairs.

Every frame is a 40-byte header, followed by ``length`` payload bytes for the ops that
carry data (HELLO, WRITE, SEND, READ_RESP, NAK)::

    op u8 | status u8 | flags u16 | imm u32 | seq u32 | ack u32 | rkey u32 | pad u32
    | addr u64 | length u64

``seq`` numbers the requests of one direction from 1; READ_RESP and NAK carry the number
of the request they answer. ``ack``, in any frame, acknowledges every request of the
other direction up to it (0: nothing new), so acknowledgements ride on the traffic that
goes back anyway; a bare ACK frame carries one when there is none. A NAK fails request
``seq`` and carries a reason in words as its payload.
"""
from __future__ import annotations

import enum
import struct
from typing import NamedTuple

HEADER = struct.Struct("<BBHIIIIIQQ")
HEADER_SIZE = HEADER.size
TOKEN_SIZE = 16
F_IMM = 1  # flags: the request carries immediate data
F_DONE = 2  # flags: the requester completed the request already (its data went through
            # shared memory), so its acknowledgement may wait for a frame going back


class Op(enum.IntEnum):
    """Frame operations."""

    HELLO = 1      # first frame of a dial: payload = token of the target QP + of the dialer's
    WRITE = 2      # RDMA write, the data as payload
    SEND = 3       # send, the data as payload
    READ_REQ = 4   # RDMA read request
    READ_RESP = 5  # the data read, as payload
    IMM = 6        # the immediate of a write whose data went through shared memory
    ACK = 7
    NAK = 8


class Header(NamedTuple):
    op: int
    status: int
    flags: int
    imm: int
    seq: int
    ack: int
    rkey: int
    pad: int
    addr: int
    length: int  # bytes written, sent or read

    @property
    def payload(self) -> int:
        """How many payload bytes follow the header."""
        return self.length if self.op in _WITH_PAYLOAD else 0


_WITH_PAYLOAD = frozenset((Op.HELLO, Op.WRITE, Op.SEND, Op.READ_RESP, Op.NAK))

# the ops as plain ints, compared on every frame (IntEnum comparisons are slow)
WRITE, SEND, READ_REQ, READ_RESP, IMM, ACK, NAK = (int(o) for o in (
    Op.WRITE, Op.SEND, Op.READ_REQ, Op.READ_RESP, Op.IMM, Op.ACK, Op.NAK))
#: the ops that are requests (numbered by ``seq``, acknowledged by the peer)
REQUESTS = frozenset((WRITE, SEND, READ_REQ, IMM))


def frame(op: Op, status: int = 0, flags: int = 0, imm: int = 0, seq: int = 0, ack: int = 0,
          rkey: int = 0, addr: int = 0, length: int = 0) -> bytes:
    """A frame header; ``length`` payload bytes follow it."""
    return HEADER.pack(op, status, flags, imm, seq, ack, rkey, 0, addr, length)


def parse(buf: object, offset: int = 0) -> Header:
    """The header at ``offset`` of ``buf``."""
    return Header._make(HEADER.unpack_from(buf, offset))  # type: ignore[arg-type]


def hello(target_token: bytes, own_token: bytes) -> bytes:
    """The first frame of a dial: whom it is for and who dials."""
    return frame(Op.HELLO, length=2 * TOKEN_SIZE) + target_token + own_token
