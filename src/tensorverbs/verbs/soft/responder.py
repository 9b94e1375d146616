"""The responder half of a soft queue pair: receives, incoming frames, acknowledgements.

Requests are executed in arrival order; a SEND, or the immediate of a write, consumes the
oldest posted receive. When none is posted the request is held (its payload buffered)
until one is, as hardware retries forever on receiver-not-ready; acknowledgements stop
before the first held request meanwhile. An acknowledgement rides on the next frame
going back; a bare ACK frame leaves before the driver sleeps only when a request waits
for it (one whose requester completed it already, a same-host write, does not).
"""
from __future__ import annotations

import collections
from typing import Sequence

from ...errors import InternalError
from ..model import RecvWR, WcOpcode, WcStatus, WorkCompletion
from .stream import discard
from .wire import (
    ACK, F_DONE, F_IMM, IMM, NAK, READ_REQ, READ_RESP, REQUESTS, SEND, WRITE, Header, Op, frame,
)
from .work import LOCAL_WRITE, REMOTE_READ, REMOTE_WRITE, PostedRecv, VerbsError, check_region


class Responder:
    """Mixed into :class:`~.qp.SoftQP`, which provides ``_lock``, the stream, the engine
    and the CQs, and calls :meth:`_init_responder` when it is made."""

    def _init_responder(self) -> None:
        self._recvs: collections.deque[PostedRecv] = collections.deque()
        self._held: collections.deque[tuple[Header, bytearray | None]] = collections.deque()
        self._rx_seq = 0   # requests started
        self._rx_done = 0  # requests finished
        self._rx_acked = 0
        self._rx_frame: tuple[bytearray | None, VerbsError | None] = (None, None)
        self._nak_sent = False
        self._ack_scheduled = False
        self._ack_wanted = False  # a request that waits for its acknowledgement came in

    def _post_recv(self, wr: RecvWR) -> None:
        try:
            recv = PostedRecv(wr.wr_id, [v for _, v in self._gather(wr.sg_list, LOCAL_WRITE)], None)
        except VerbsError as exc:
            recv = PostedRecv(wr.wr_id, [], exc)
        with self._lock:
            if self._failed is not None:
                self.recv_cq.deliver([WorkCompletion(wr.wr_id, WcStatus.WR_FLUSH_ERR, WcOpcode.RECV,
                                                     self.qp_num, detail=self._failed)])
                return
            self._recvs.append(recv)
            if self._held:
                while self._held and self._recvs and self._failed is None:
                    self._deliver(*self._held.popleft())
                self._ack_soon()

    def _recv_outstanding(self) -> int:
        return len(self._recvs)

    def frame_started(self, hdr: Header) -> Sequence[memoryview]:
        """Where a frame's payload goes (called by the stream, from the driving thread,
        for frames that carry one)."""
        with self._lock:
            if self._begin(hdr):
                try:
                    return self._payload_target(hdr)
                except VerbsError as exc:
                    self._rx_frame = (None, exc)
            return discard(hdr.payload)

    def _begin(self, hdr: Header) -> bool:
        """Take a frame's acknowledgement and number its request (under the lock); False
        when the frame is to be dropped."""
        self._rx_frame = (None, None)
        if hdr.ack:
            self._acked_upto(hdr.ack)
        if hdr.op in REQUESTS:
            self._rx_seq += 1
            if hdr.seq != self._rx_seq:
                raise InternalError(f"request {hdr.seq} arrived, {self._rx_seq} expected")
            return not self._nak_sent and self._failed is None
        return True

    def _payload_target(self, hdr: Header) -> Sequence[memoryview]:
        if hdr.op == WRITE:
            mr = self._ctx.mrs.get(hdr.rkey)
            return [check_region(mr, self._pd, hdr.rkey, hdr.addr, hdr.length, REMOTE_WRITE,
                                 WcStatus.REM_ACCESS_ERR)]
        if hdr.op == SEND:
            if self._held or not self._recvs:
                buf = bytearray(hdr.length)
                self._rx_frame = (buf, None)
                return [memoryview(buf)]
            self._recvs[0].check(hdr.length)
            return self._recvs[0].scatter(hdr.length)
        if hdr.op == READ_RESP:
            op = self._by_seq.get(hdr.seq)
            if op is None or op.byte_len != hdr.length:
                raise InternalError(f"unexpected read response {hdr.seq} of {hdr.length} bytes")
            return op.sinks
        if hdr.op == NAK:
            buf = bytearray(hdr.length)
            self._rx_frame = (buf, None)
            return [memoryview(buf)]
        raise InternalError(f"frame {hdr.op} carries no payload")

    def frame_finished(self, hdr: Header) -> None:
        """A frame has arrived whole: act on it."""
        with self._lock:
            if not hdr.payload and not self._begin(hdr):
                return
            buf, error = self._rx_frame
            code = hdr.op
            if code in REQUESTS:
                if self._nak_sent or self._failed is not None:
                    return
                if error is not None:
                    self._reject(hdr, error)
                    return
                self._rx_done = hdr.seq
                if not hdr.flags & F_DONE:
                    self._ack_wanted = True
            if code == IMM or code == SEND or (code == WRITE and hdr.flags & F_IMM):
                if self._held or not self._recvs:
                    self._held.append((hdr, buf))
                else:
                    self._deliver(hdr, buf)
            elif code == READ_REQ:
                self._answer_read(hdr)
            elif code == READ_RESP:
                self._finish_request(hdr.seq)
            elif code == NAK:
                self._finish_request(hdr.seq, WcStatus(hdr.status),
                                     "peer: " + bytes(buf or b"").decode(errors="replace"))
            elif code != WRITE and code != ACK:  # an ACK's work was done by _begin
                raise InternalError(f"unexpected frame {hdr.op} on the stream")

    def _deliver(self, hdr: Header, held: bytearray | None) -> None:
        """Complete the oldest posted receive with request ``hdr`` (a send whose data
        ``held`` was buffered, or is already in place when None; or an immediate)."""
        recv = self._recvs.popleft()
        is_send = hdr.op == SEND
        if is_send and held is not None:
            try:
                recv.check(hdr.length)
            except VerbsError as exc:
                self._reject(hdr, exc, recv)
                return
            offset = 0
            for view in recv.scatter(hdr.length):
                view[:] = held[offset:offset + len(view)]
                offset += len(view)
        self.recv_cq.deliver([WorkCompletion(
            recv.wr_id, WcStatus.SUCCESS, WcOpcode.RECV if is_send else WcOpcode.RECV_RDMA_WITH_IMM,
            self.qp_num, byte_len=hdr.length, imm_data=hdr.imm if hdr.flags & F_IMM else None)])

    def _reject(self, hdr: Header, error: VerbsError, recv: PostedRecv | None = None) -> None:
        """Fail request ``hdr``: a remote access error is the requester's alone; a receive
        that cannot take a send fails here too and takes this queue pair down."""
        if error.status == WcStatus.REM_ACCESS_ERR:
            status = WcStatus.REM_ACCESS_ERR
        else:
            recv = recv or self._recvs.popleft()
            self.recv_cq.deliver([WorkCompletion(recv.wr_id, error.status, WcOpcode.RECV,
                                                 self.qp_num, byte_len=hdr.length, detail=error.detail)])
            self._fail_soon(error.detail)
            status = (WcStatus.REM_INV_REQ_ERR if error.status == WcStatus.LOC_LEN_ERR
                      else WcStatus.REM_OP_ERR)
        self._rx_done = min(self._rx_done, hdr.seq - 1)
        detail = error.detail.encode()
        self._send([frame(Op.NAK, status=status, seq=hdr.seq, ack=self._ack_field(),
                          length=len(detail)), detail])
        self._nak_sent = True

    def _answer_read(self, hdr: Header) -> None:
        try:
            data = check_region(self._ctx.mrs.get(hdr.rkey), self._pd, hdr.rkey, hdr.addr,
                                hdr.length, REMOTE_READ, WcStatus.REM_ACCESS_ERR) \
                if hdr.length else memoryview(b"")
        except VerbsError as exc:
            self._reject(hdr, exc)
            return
        self._send([frame(Op.READ_RESP, seq=hdr.seq, ack=self._ack_field(), length=hdr.length),
                    data])

    # -- acknowledgements ----------------------------------------------------------------
    def _ack_field(self) -> int:
        """The acknowledgement an outgoing frame carries (under the lock): every request
        done so far, stopping before the first held one; 0 when there is nothing new."""
        done = min(self._rx_done, self._held[0][0].seq - 1) if self._held else self._rx_done
        if done <= self._rx_acked or self._nak_sent:
            return 0
        self._rx_acked = done
        self._ack_wanted = False
        return done

    def _ack_soon(self) -> None:
        """Acknowledge before the driver next blocks, unless a frame going back carries
        it first (under the lock)."""
        if not self._ack_scheduled and self._stream is not None:
            self._ack_scheduled = True
            self._engine.when_idle(self._ack_now)

    def _ack_now(self) -> None:
        with self._lock:
            self._ack_scheduled = False
            if self._stream is not None:
                ack = self._ack_field()
                if ack:
                    self._send([frame(Op.ACK, ack=ack)])
