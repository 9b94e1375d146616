"""What a client that reaches a /metrics endpoint can make it hold, tried with raw
sockets: a connection that sends no request is closed after the read timeout, and
connections past the cap take no thread and are not served."""
from __future__ import annotations

import socket
import threading
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry

from tensorverbs.metrics.endpoint import MetricsEndpoint

IDLE = 200


@pytest.fixture
def endpoint():
    served = MetricsEndpoint(CollectorRegistry(), "127.0.0.1", 0)
    yield served
    served.stop()


def _connect(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=60)


def _answer(sock: socket.socket) -> bytes:
    """What the endpoint answers on ``sock`` before it closes it (b"" for a reset)."""
    got = b""
    try:
        while chunk := sock.recv(4096):
            got += chunk
    except ConnectionResetError:
        pass
    return got


def test_a_connection_that_sends_no_request_is_closed(endpoint):
    with _connect(endpoint.address) as idle:
        idle.sendall(b"GET /metrics HTTP/1.1\r\n")  # and never the rest
        assert b" 200 " not in _answer(idle)  # closed, before the client's 60 s


def test_connections_past_the_cap_take_no_thread_and_are_not_served(endpoint):
    threads = threading.active_count()
    idle = [_connect(endpoint.address) for _ in range(IDLE)]
    try:
        with _connect(endpoint.address) as extra:  # accepted after all of them
            extra.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            answer = _answer(extra)
        assert answer == b"" or answer.startswith(b"HTTP/1.0 503 "), answer[:200]
        assert threading.active_count() - threads < IDLE, "a thread per connection"
    finally:
        for sock in idle:
            sock.close()
    deadline = time.monotonic() + 60
    while True:  # the idle connections' threads end as they see them closed
        try:
            with urllib.request.urlopen(f"http://{endpoint.address}/metrics", timeout=60) as response:
                assert response.status == 200
                break
        except (urllib.error.URLError, ConnectionError) as exc:
            assert time.monotonic() < deadline, f"still refused: {exc}"
