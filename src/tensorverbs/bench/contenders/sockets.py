"""The stream limits: a raw socket between two processes (TCP on loopback, or a Unix
socket), the sink sending a small request and reading the reply with ``recv_into``
straight into a buffer of its own. At small sizes this is a socket round trip."""
from __future__ import annotations

import os
import secrets
import socket
import struct

import numpy as np

from ...local_cluster import free_port
from .base import Payloads, Sink as BaseSink, Source as BaseSource

_REQUEST = struct.Struct("<Q")  # bytes wanted
UNIX_BUFFER = 4 << 20


def available(family: str) -> tuple[bool, str]:
    """Whether sockets of ``family`` can be made here."""
    if family == "unix" and not hasattr(socket, "AF_UNIX"):
        return False, "no Unix sockets on this system"
    return True, f"{family} socket, sendall/recv_into"


def link(family: str) -> dict:
    """Where the sink listens."""
    if family == "tcp":
        return {"address": ("127.0.0.1", free_port())}
    return {"address": f"\0tensorverbs-bench-{os.getpid()}-{secrets.token_hex(4)}"}


def _family(family: str) -> int:
    return socket.AF_INET if family == "tcp" else socket.AF_UNIX


def _tune(sock: socket.socket) -> None:
    """No Nagle delay on TCP; larger buffers on a Unix socket (TCP sizes its own)."""
    if sock.family == socket.AF_INET:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    else:
        for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
            sock.setsockopt(socket.SOL_SOCKET, option, UNIX_BUFFER)


def _read_into(sock: socket.socket, view: memoryview) -> None:
    got, n = 0, len(view)
    while got < n:
        k = sock.recv_into(view[got:])
        if not k:
            raise ConnectionError("the peer closed the connection")
        got += k


class Source(BaseSource):
    """The sending peer: ``sendall`` of the payload."""

    passive = False

    def __init__(self, link: dict, family: str) -> None:
        self.listener = socket.socket(_family(family), socket.SOCK_STREAM)
        self.listener.bind(link["address"])
        self.listener.listen(1)
        self.sock: socket.socket | None = None
        self.payloads = Payloads()
        self.request = memoryview(bytearray(_REQUEST.size))

    def serve(self, nbytes: int, count: int, step: int) -> None:
        if self.sock is None:
            self.sock, _ = self.listener.accept()
            _tune(self.sock)
        data = memoryview(self.payloads.get(nbytes)).cast("B")
        for _ in range(count):
            _read_into(self.sock, self.request)
            self.sock.sendall(data[:_REQUEST.unpack(self.request)[0]])

    def close(self) -> None:
        for sock in (self.sock, self.listener):
            if sock is not None:
                sock.close()


class Sink(BaseSink):
    """The receiving peer: ``recv_into`` a preallocated buffer (and a round trip for small sizes)."""

    def __init__(self, link: dict, family: str) -> None:
        super().__init__()
        self.sock = socket.socket(_family(family), socket.SOCK_STREAM)
        self.sock.connect(link["address"])  # the source listens before the sink starts
        _tune(self.sock)
        self.buffer = np.empty(0, np.uint8)

    def prepare(self, nbytes: int) -> None:
        if self.buffer.nbytes != nbytes:
            self.buffer = np.ones(nbytes, np.uint8)  # written, so mapped before the timing

    def fetch_one(self, nbytes: int, step: int) -> np.ndarray:
        self.sock.sendall(_REQUEST.pack(nbytes))
        _read_into(self.sock, memoryview(self.buffer))
        return self.buffer

    def close(self) -> None:
        self.sock.close()

