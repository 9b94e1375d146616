"""A task's ``/metrics`` endpoint: prometheus-client's HTTP server, from start to stop."""
from __future__ import annotations

import os
from collections.abc import Mapping

from prometheus_client import CollectorRegistry, start_http_server

from ..errors import InvalidArgumentError, UnavailableError
from ..ports import host_port

#: the environment variable that turns the endpoint on (0 picks a free port)
PORT_VARIABLE = "TENSORVERBS_METRICS_PORT"


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


class MetricsEndpoint:
    """``registry`` served at ``http://<address>/metrics`` until :meth:`stop`."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int) -> None:
        try:
            self._httpd, self._thread = start_http_server(port, host, registry)
        except OSError as exc:
            raise UnavailableError(f"cannot serve metrics on {host_port(host, port)}: {exc}") from None
        #: host:port it listens on (the port chosen when 0 was asked for)
        self.address = host_port(host, self._httpd.server_port)

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()
