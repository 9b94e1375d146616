"""The listening sockets of a context and the thread that accepts dials on them.

A queue pair dials the other side's listener (Unix socket on one host, TCP otherwise)
and sends a HELLO naming the queue pair it wants; the accept thread reads it and hands
the socket over. This thread is never on the data path.
"""
from __future__ import annotations

import logging
import os
import secrets
import select
import socket
import threading
from typing import Callable

from ...errors import UnavailableError
from .wire import HEADER_SIZE, TOKEN_SIZE, Op, hello, parse

log = logging.getLogger(__name__)

#: how long a dialer may take to send its HELLO, and to be connected at all
GREETING_TIMEOUT = 10.0
_UNIX_BUFFER = 4 << 20

Attach = Callable[[bytes, bytes, socket.socket], None]


def tune(sock: socket.socket) -> None:
    """Latency and buffer options of a data socket."""
    if sock.family == socket.AF_UNIX:
        for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
            sock.setsockopt(socket.SOL_SOCKET, opt, _UNIX_BUFFER)
        return
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for opt, value in ((socket.TCP_KEEPIDLE, 10), (socket.TCP_KEEPINTVL, 5), (socket.TCP_KEEPCNT, 3)):
        sock.setsockopt(socket.IPPROTO_TCP, opt, value)


def dial(unix_name: str | None, tcp: tuple[str, int], target: bytes, own: bytes) -> socket.socket:
    """Connect to a listener (its Unix socket when ``unix_name`` is given, else TCP) and
    greet it: the queue pair of token ``target`` is wanted by the one of token ``own``."""
    try:
        if unix_name is not None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(GREETING_TIMEOUT)
        else:
            sock = socket.create_connection(tcp, timeout=GREETING_TIMEOUT)
        try:
            if unix_name is not None:
                sock.connect("\0" + unix_name)
            sock.sendall(hello(target, own))
        except OSError:
            sock.close()
            raise
    except OSError as exc:
        where = f"unix:{unix_name}" if unix_name is not None else f"{tcp[0]}:{tcp[1]}"
        raise UnavailableError(f"cannot reach the peer's queue pair at {where}: {exc}") from None
    tune(sock)
    return sock


class Listener:
    """A TCP listener on ``host`` and an abstract Unix one, served by one thread."""

    def __init__(self, host: str, attach: Attach) -> None:
        self._attach = attach
        self.tcp = socket.create_server((host, 0))
        self.address = (host, self.tcp.getsockname()[1])
        self.unix_name = f"tensorverbs-soft-{secrets.token_hex(8)}"
        self.unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.unix.bind("\0" + self.unix_name)
        self.unix.listen(128)
        self._stop_r, self._stop_w = os.pipe()
        self._thread = threading.Thread(target=self._run, name="tensorverbs-soft-accept", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        poller = select.poll()
        for fd in (self.tcp.fileno(), self.unix.fileno(), self._stop_r):
            poller.register(fd, select.POLLIN)
        while True:
            for fd, _ in poller.poll():
                if fd == self._stop_r:
                    return
                server = self.tcp if fd == self.tcp.fileno() else self.unix
                try:
                    sock, _ = server.accept()
                except OSError:
                    continue
                self._greet(sock)

    def _greet(self, sock: socket.socket) -> None:
        try:
            sock.settimeout(GREETING_TIMEOUT)
            data = _recv_exact(sock, HEADER_SIZE + 2 * TOKEN_SIZE)
            hdr = parse(data)
            if hdr.op != Op.HELLO or hdr.length != 2 * TOKEN_SIZE:
                raise ValueError("not a HELLO")
            tune(sock)
            self._attach(data[HEADER_SIZE:HEADER_SIZE + TOKEN_SIZE], data[HEADER_SIZE + TOKEN_SIZE:], sock)
        except (OSError, ValueError) as exc:
            log.warning("soft verbs: dropped a connection without a valid greeting: %s", exc)
            sock.close()

    def close(self) -> None:
        os.write(self._stop_w, b"x")
        self._thread.join(timeout=GREETING_TIMEOUT + 1)
        for closable in (self.tcp, self.unix):
            closable.close()
        os.close(self._stop_r)
        os.close(self._stop_w)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            raise ValueError("closed before the greeting was complete")
        got += k
    return bytes(buf)
