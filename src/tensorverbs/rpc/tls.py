"""TLS for the control plane: server and channel credentials, and what a failed handshake
means.

``TENSORVERBS_TLS_CERT`` and ``TENSORVERBS_TLS_KEY`` (PEM files) make a task serve TLS and
present that certificate when it calls; with ``TENSORVERBS_TLS_CA`` its server requires
clients' certificates of that CA (mutual TLS) and its calls trust only that CA, else the
system's roots. Peers are dialled at their ``host:port`` from the ClusterSpec and
verified against it with no target-name override: a task's certificate must name its
host (``tensorverbs certs`` makes such certificates).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping

import grpc

from ..errors import InvalidArgumentError

_VARIABLES = {"cert": "TENSORVERBS_TLS_CERT", "key": "TENSORVERBS_TLS_KEY", "ca": "TENSORVERBS_TLS_CA"}


@dataclass(frozen=True)
class TlsConfig:
    """A task's certificate and key, and the CA of its job (mutual TLS) or None (the
    server does not ask for client certificates; calls trust the system's roots)."""

    cert: str
    key: str
    ca: str | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "TlsConfig | None":
        """The TENSORVERBS_TLS_* variables' configuration; None when none is set."""
        env = os.environ if environ is None else environ
        given = {field: env.get(var) or None for field, var in _VARIABLES.items()}
        if not any(given.values()):
            return None
        cert, key = given["cert"], given["key"]
        if cert is None or key is None:
            missing = [_VARIABLES[f] for f in ("cert", "key") if given[f] is None]
            raise InvalidArgumentError(f"TLS needs {' and '.join(missing)} too")
        return cls(cert, key, given["ca"])

    def _read(self, field: str) -> bytes:
        path = getattr(self, field)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise InvalidArgumentError(f"TLS {field} {path!r} cannot be read: {exc.strerror}") from None
        if b"-----BEGIN " not in data:
            raise InvalidArgumentError(f"TLS {field} {path!r} is not PEM")
        return data

    def server_credentials(self) -> grpc.ServerCredentials:
        """Credentials of this task's server (requiring client certificates with a CA)."""
        ca = self._read("ca") if self.ca else None
        return grpc.ssl_server_credentials([(self._read("key"), self._read("cert"))],
                                           root_certificates=ca, require_client_auth=ca is not None)

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """Credentials of this task's channels to its peers."""
        return grpc.ssl_channel_credentials(self._read("ca") if self.ca else None,
                                            self._read("key"), self._read("cert"))


def handshake_failure(details: str) -> str | None:
    """Why this task's TLS handshake with a peer failed, from a failed call's details;
    None if the call did not fail so."""
    if "handshake failed" not in details.lower():
        return None
    return (f"the TLS handshake failed ({details}): the peer does not serve TLS, or its "
            "certificate is not of this task's CA or does not name its host")


def refusal(details: str) -> str | None:
    """Why connections to a peer fail for want of TLS agreement, from a failed call's
    details: a failed handshake, or the peer closing them before a call (it requires
    TLS, or a client certificate, that this task lacks). None for any other failure (a
    peer not up yet, say); a peer that dies may close a connection too, so only a
    refusal that persists is one."""
    if details.endswith("Socket closed"):
        return ("the peer closes every connection before a call: it requires TLS, or a "
                "client certificate of its CA, that this task does not present")
    return handshake_failure(details)
