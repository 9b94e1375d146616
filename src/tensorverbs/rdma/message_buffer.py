"""RdmaMessageBuffer: fixed registered buffers that carry control messages.

A channel has a tx buffer and an rx buffer of N slots each (N = TENSORVERBS_MESSAGE_SLOTS;
N = 1 is the seeds' single buffer). A message is encoded into a free tx slot and RDMA
written into the peer's rx slot of the same sequence number with immediate 0xFFFFFFFF.
Both slots are busy until the peer has parsed the message and answered with an ACK (an
empty write with immediate 0xFFFFFFFE): the ACK proves the write has completed, so the
local slot needs no completion of its own and message writes and ACKs are posted
unsignaled (no completion, no wake-up). At most N messages are in flight per direction;
later ones wait in a queue, in order.
"""
from __future__ import annotations

import collections
import threading
from typing import Callable, Sequence

from ..verbs import Access, ProtectionDomain, SendWR, WrOpcode
from .messages import IMM_ACK, IMM_MESSAGE, SLOT_BYTES, RdmaMessage, decode, encode_into
from .work import WorkKind, wr_id


class RdmaMessageBuffer:
    """N message slots of registered memory."""

    def __init__(self, pd: ProtectionDomain, slots: int, access: Access) -> None:
        self.slots = slots
        self.mr = pd.alloc_mr(slots * SLOT_BYTES, access)

    def slot(self, index: int) -> memoryview:
        return self.mr.buf[index * SLOT_BYTES:(index + 1) * SLOT_BYTES]

    def close(self) -> None:
        self.mr.close()


class TxMessageBuffer(RdmaMessageBuffer):
    """The sending side: slot states, remote credits and the queue of waiting messages."""

    def __init__(self, pd: ProtectionDomain, slots: int, on_sent: Callable[[RdmaMessage], None]) -> None:
        super().__init__(pd, slots, Access.LOCAL_WRITE)
        self._lock = threading.Lock()
        self._sent = 0       # messages written so far
        self._acked = 0      # ACKs received so far
        self._queue: collections.deque[RdmaMessage] = collections.deque()
        self._on_sent = on_sent
        self._post: Callable[[Sequence[SendWR]], None] | None = None
        self.remote_addr = 0
        self.remote_rkey = 0

    def connect(self, post: Callable[[Sequence[SendWR]], None], remote_addr: int,
                remote_rkey: int) -> None:
        """Target the peer's rx buffer, posting through ``post``; messages queued before
        this go out now."""
        with self._lock:
            self._post, self.remote_addr, self.remote_rkey = post, remote_addr, remote_rkey
            self._drain()

    def send(self, msg: RdmaMessage) -> None:
        """Send ``msg`` now if a slot is free on both sides, else when one frees up."""
        with self._lock:
            self._queue.append(msg)
            self._drain()

    def _drain(self) -> None:
        wrs = []
        while self._queue and self._post is not None and self._sent - self._acked < self.slots:
            index = self._sent % self.slots
            msg = self._queue.popleft()
            length = encode_into(msg, self.slot(index))
            self._sent += 1
            wrs.append(SendWR(
                wr_id(WorkKind.MESSAGE, index), WrOpcode.RDMA_WRITE_WITH_IMM,
                [self.mr.sge(index * SLOT_BYTES, length)],
                remote_addr=self.remote_addr + index * SLOT_BYTES, rkey=self.remote_rkey,
                imm_data=IMM_MESSAGE, signaled=False))
            self._on_sent(msg)
        if wrs:
            self._post(wrs)

    def acked(self) -> None:
        """The peer parsed our oldest unacknowledged message: its slots (ours and the peer's)
        are idle again."""
        with self._lock:
            self._acked += 1
            self._drain()


class RxMessageBuffer(RdmaMessageBuffer):
    """The receiving side: the peer writes messages into our slots in order."""

    def __init__(self, pd: ProtectionDomain, slots: int) -> None:
        super().__init__(pd, slots, Access.LOCAL_WRITE | Access.REMOTE_WRITE)
        self._received = 0

    def take(self, byte_len: int) -> RdmaMessage:
        """Parse the next message (``byte_len`` bytes, from the completion); the caller
        then ACKs it, freeing the slot. Raises MessageError for a malformed message."""
        index = self._received % self.slots
        self._received += 1
        return decode(self.slot(index)[:byte_len])


def ack(remote_addr: int, rkey: int) -> SendWR:
    """The ACK that frees the peer's oldest busy message slot."""
    return SendWR(wr_id(WorkKind.ACK, 0), WrOpcode.RDMA_WRITE_WITH_IMM, [],
                  remote_addr=remote_addr, rkey=rkey, imm_data=IMM_ACK, signaled=False)
