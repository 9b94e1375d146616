"""Choosing a TCP port for a task before the task listens on it, and why one cannot be
listened on.

A port is only checked free, not held, until its task binds it. So it is chosen below the
kernel's ephemeral port range: ports in that range go to outgoing connections and to
listeners on port 0 (the soft verbs provider's among them), which could take it first.
"""
from __future__ import annotations

import errno
import ipaddress
import random
import socket
from collections.abc import Collection

from .errors import InvalidArgumentError, UnavailableError

#: where Linux keeps the range it picks ephemeral ports from
EPHEMERAL_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"
LOWEST = 1024  # below: privileged ports


def candidates(ephemeral_range: str = EPHEMERAL_RANGE) -> range:
    """The ports to choose from: those outside the ephemeral range (below it, or above it
    when little is left below), all unprivileged ports when it leaves too few."""
    try:
        with open(ephemeral_range) as f:
            low, high = (int(field) for field in f.read().split())
    except (OSError, ValueError):
        return range(LOWEST, 65536)
    if low - LOWEST >= 1024:
        return range(LOWEST, low)
    if 65535 - high >= 1024:
        return range(high + 1, 65536)
    return range(LOWEST, 65536)


def host_port(host: str, port: int) -> str:
    """``host:port``, an IPv6 address in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def loopback(host: str) -> bool:
    """Whether ``host`` is reached only from this host: every address it resolves to is a
    loopback address (not "", 0.0.0.0 or ::, which are every address; not a name that does
    not resolve)."""
    try:
        found = socket.getaddrinfo(host or None, None, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError:
        return False
    return bool(found) and all(ipaddress.ip_address(str(sockaddr[0]).split("%")[0]).is_loopback
                               for *_, sockaddr in found)


def free_port(host: str = "127.0.0.1", taken: Collection[int] = ()) -> int:
    """A TCP port of ``host`` that nothing uses now and not in ``taken``, outside the
    ephemeral range (:func:`candidates`). InvalidArgumentError if ``host`` cannot be listened
    on, UnavailableError if no port is free."""
    try:
        family, kind, _, _, sockaddr = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)[0]
    except OSError as exc:
        raise InvalidArgumentError(f"cannot listen on host {host!r}: {exc}") from None
    ports = candidates()
    for _ in range(1000):
        port = random.choice(ports)
        if port in taken:
            continue
        with socket.socket(family, kind) as s:
            try:
                s.bind((sockaddr[0], port, *sockaddr[2:]))
            except OSError:
                continue
            return port
    raise UnavailableError(f"no free port on {host} in {ports.start}-{ports.stop - 1}")


def bind_failure(address: str) -> str | None:
    """Why ``address`` (``host:port``) cannot be listened on now, as a task's gRPC server
    binds it (SO_REUSEADDR, no SO_REUSEPORT: a task never shares its port): the address is
    already in use, not one of this host, or the system's reason; None if it can be."""
    host, port = address.rsplit(":", 1)
    host = host.strip("[]")
    try:
        found = socket.getaddrinfo(host or None, int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        return f"{host} cannot be resolved: {exc.strerror or exc}"
    for family, kind, proto, _, sockaddr in found:
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(sockaddr)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    return "address already in use (a listener holds it: is this task already running?)"
                if exc.errno == errno.EADDRNOTAVAIL:
                    return f"{host} is not an address of this host"
                return exc.strerror or str(exc)
    return None
