"""A framed, non-blocking byte stream: a send queue drained without ever blocking, and a
receive side that reads each payload straight into the memory its handler names.

Small frames are read in batches through a receive buffer; once only payload remains,
the socket is read with ``recv_into`` directly into the destination (a target region, a
receive buffer), so bulk data is never copied through an intermediate buffer.
"""
from __future__ import annotations

import collections
import itertools
import socket
import threading
from typing import Callable, Protocol, Sequence

from .wire import HEADER_SIZE, Header, parse

_IOV_MAX = 512
_RX_BUFFER = 256 << 10
_BULK_READ = 64 << 10  # a short read this large is not a drained socket yet
_SCRATCH = memoryview(bytearray(_RX_BUFFER))

Buffer = bytes | memoryview


class FrameHandler(Protocol):
    """Where a stream's frames go: the queue pair that owns it."""

    def frame_started(self, hdr: Header) -> Sequence[memoryview]:
        """(Frames with a payload only.) Where the ``hdr.payload`` bytes of the frame go (their sizes add up)."""

    def frame_finished(self, hdr: Header) -> None:
        """The frame and its payload have arrived."""


def discard(length: int) -> list[memoryview]:
    """Destinations that swallow ``length`` bytes."""
    full, rest = divmod(length, len(_SCRATCH))
    return [_SCRATCH] * full + ([_SCRATCH[:rest]] if rest else [])


class Stream:
    """One connected socket between two queue pairs."""

    def __init__(self, sock: socket.socket, handler: FrameHandler,
                 want_write: Callable[[bool], None]) -> None:
        """``want_write(on)`` is called (under the send lock) when bytes start or stop
        waiting in the send queue, to watch the socket for writability meanwhile."""
        sock.setblocking(False)
        self.sock = sock
        self.fd = sock.fileno()
        self.handler = handler
        self._want_write = want_write
        self._watching = False
        self.tx_lock = threading.Lock()
        self._tx: collections.deque[Buffer] = collections.deque()
        self._rx = bytearray(_RX_BUFFER)
        self._rxv = memoryview(self._rx)
        self._head = 0
        self._tail = 0
        self._frame: Header | None = None
        self._sinks: collections.deque[memoryview] = collections.deque()

    # -- transmit ------------------------------------------------------------------------
    def send(self, parts: Sequence[Buffer]) -> None:
        """Queue ``parts`` in order and push what the socket takes now, never blocking.
        Raises OSError when the connection is broken."""
        with self.tx_lock:
            if self._tx:
                self._tx.extend(parts)
            else:  # the common case: straight to the socket, queue only what it leaves
                try:
                    sent = self.sock.sendmsg(parts)
                except (BlockingIOError, InterruptedError):
                    sent = 0
                for part in parts:
                    if sent >= len(part):
                        sent -= len(part)
                    else:
                        self._tx.append(memoryview(part)[sent:] if sent else part)
                        sent = 0
                if not self._tx:
                    return
            self._push()

    def flush(self) -> None:
        """Push queued bytes (the socket became writable)."""
        with self.tx_lock:
            self._push()

    def _push(self) -> None:
        tx = self._tx
        try:
            while tx:
                sent = self.sock.sendmsg(list(itertools.islice(tx, _IOV_MAX)))
                while tx and sent >= len(tx[0]):
                    sent -= len(tx.popleft())
                if sent:
                    tx[0] = memoryview(tx[0])[sent:]
                    raise BlockingIOError  # the socket is full
        except (BlockingIOError, InterruptedError):
            pass
        if bool(tx) != self._watching:
            self._watching = bool(tx)
            self._want_write(self._watching)

    # -- receive -------------------------------------------------------------------------
    def receive(self) -> bool:
        """Read and dispatch what the socket holds. False at the end of the stream.
        Raises OSError when the connection is broken. A small read shorter than asked
        for drained the socket, so it ends the call without a read that would fail (the
        socket is level-triggered: more data makes it readable again); during a bulk
        payload reading goes on until the socket is empty."""
        try:
            while True:
                if self._sinks and self._head == self._tail:
                    view = self._sinks[0]
                    n = self.sock.recv_into(view)
                    if n == 0:
                        return False
                    if n < len(view):
                        self._sinks[0] = view[n:]
                        if n < _BULK_READ:
                            return True
                        continue  # a bulk payload is flowing: read on while it does
                    self._sinks.popleft()
                    if not self._sinks:
                        self._finish()
                    continue
                if self._tail == len(self._rx):
                    self._compact()
                want = len(self._rx) - self._tail
                n = self.sock.recv_into(self._rxv[self._tail:])
                if n == 0:
                    return False
                self._tail += n
                self._dispatch()
                if n < want:
                    return True
        except (BlockingIOError, InterruptedError):
            return True

    def _dispatch(self) -> None:
        """Handle every complete frame in the receive buffer."""
        rx = self._rxv
        while True:
            sinks = self._sinks
            while sinks and self._head < self._tail:
                view = sinks[0]
                n = min(len(view), self._tail - self._head)
                view[:n] = rx[self._head:self._head + n]
                self._head += n
                if n < len(view):
                    sinks[0] = view[n:]
                else:
                    sinks.popleft()
                    if not sinks:
                        self._finish()
            if sinks or self._tail - self._head < HEADER_SIZE:
                break
            hdr = parse(self._rx, self._head)
            self._head += HEADER_SIZE
            self._frame = hdr
            if hdr.payload:
                sinks.extend(self.handler.frame_started(hdr))
            else:
                self._finish()
        if self._head == self._tail:
            self._head = self._tail = 0

    def _compact(self) -> None:
        left = self._tail - self._head
        self._rx[:left] = self._rx[self._head:self._tail]
        self._head, self._tail = 0, left

    def _finish(self) -> None:
        hdr, self._frame = self._frame, None
        self.handler.frame_finished(hdr)  # type: ignore[arg-type]

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
