"""A TCP port that never answers, and soft queue pairs' endpoints aimed at it: for tests of
set-ups that dial an address given by an untrusted peer."""
from __future__ import annotations

import socket
from typing import Iterator

import pytest


@pytest.fixture
def black_hole() -> Iterator[int]:
    """A TCP port whose connection attempts hang (its one place in the accept queue is taken)."""
    with socket.socket() as listening, socket.socket() as filler:
        listening.bind(("127.0.0.1", 0))
        listening.listen(0)
        filler.connect(listening.getsockname())
        yield listening.getsockname()[1]


def aimed_at(endpoint: bytes, port: int) -> bytes:
    """``endpoint`` (a soft queue pair's) made to be dialed by whoever connects to it (the
    largest token), at 127.0.0.1:``port`` over TCP only."""
    head = bytearray(endpoint[:40])
    head[16:32] = b"\xff" * 16
    head[32:34] = port.to_bytes(2, "little")
    head[35] = 0  # no Unix socket
    return bytes(head) + endpoint[40:40 + head[34]]


def dialing(port: int) -> int:
    """How many connections to 127.0.0.1:``port`` wait for their SYN's answer."""
    with open("/proc/net/tcp") as table:
        return sum(fields[2] == f"0100007F:{port:04X}" and fields[3] == "02"
                   for fields in (line.split() for line in table.readlines()[1:]))
