"""A task's ``/metrics`` endpoint: prometheus-client's HTTP server, from start to stop.

Anyone who reaches the port is answered (Prometheus carries no token), so what a client
can hold is bounded: a connection whose request does not come within
:data:`READ_SECONDS` is closed, and past :data:`CONNECTIONS` at once a new one is answered
503 and closed without a thread of its own.
"""
from __future__ import annotations

import os
import socket
import threading
from collections.abc import Mapping
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from ..errors import InvalidArgumentError, UnavailableError
from ..ports import host_port

#: the environment variable that turns the endpoint on (0 picks a free port)
PORT_VARIABLE = "TENSORVERBS_METRICS_PORT"
#: how long the endpoint waits for each read of a request (and write of its answer)
READ_SECONDS = 10.0
#: the most connections served at once, each on a thread of its own
CONNECTIONS = 16
#: the answer to a connection past CONNECTIONS
BUSY = (b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n"
        b"too many connections to this /metrics endpoint\n")


def check_port(port: object, source: str) -> int:
    """``port`` as a TCP port number (0: any free one); InvalidArgumentError naming ``source``
    otherwise."""
    try:
        number = int(str(port).strip())
    except ValueError:
        number = -1
    if not 0 <= number <= 65535:
        raise InvalidArgumentError(f"{source}={port!r}: expected a port number in [0, 65535] "
                                   "(0 picks a free port)")
    return number


def port_from_env(environ: Mapping[str, str] | None = None) -> int | None:
    """The port :data:`PORT_VARIABLE` asks for; None when it is unset or empty."""
    text = (os.environ if environ is None else environ).get(PORT_VARIABLE, "")
    return check_port(text, PORT_VARIABLE) if text.strip() else None


class _Handler(WSGIRequestHandler):
    """One connection's request, each read given :data:`READ_SECONDS`; nothing logged."""

    timeout = READ_SECONDS

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(ThreadingWSGIServer):
    """A thread per connection, at most :data:`CONNECTIONS` at once; a connection's error
    (a request that did not come in time) closes it, unreported."""

    request_queue_size = 4 * CONNECTIONS  # connections past the cap are taken, and refused, at once

    def server_activate(self) -> None:
        self._slots = threading.BoundedSemaphore(CONNECTIONS)
        super().server_activate()

    def process_request(self, request: Any, client_address: Any) -> None:
        if self._slots.acquire(blocking=False):
            super().process_request(request, client_address)
            return
        try:  # an answer the socket's buffer takes at once, or none
            request.setblocking(False)
            request.send(BUSY)
        except OSError:
            pass
        self.shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


class MetricsEndpoint:
    """``registry`` served at ``http://<address>/metrics`` until :meth:`stop`."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int) -> None:
        try:
            family, _, _, _, sockaddr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                           flags=socket.AI_PASSIVE)[0]
            server = type("_Server", (_Server,), {"address_family": family})
            self._httpd = server(sockaddr[:2], _Handler)
        except OSError as exc:
            raise UnavailableError(f"cannot serve metrics on {host_port(host, port)}: {exc}") from None
        self._httpd.set_app(make_wsgi_app(registry))
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="tensorverbs-metrics",
                                        daemon=True)
        self._thread.start()
        #: host:port it listens on (the port chosen when 0 was asked for)
        self.address = host_port(host, self._httpd.server_port)

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()
