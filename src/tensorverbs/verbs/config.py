"""Configuration from the environment: the seeds' RDMA_* variables and tensorverbs' own.

Each setting is read once, validated, and kept in :class:`RdmaConfig`. The RDMA_QP_*
names of TensorFlow's README and the names its code read (RDMA_PKEY, RDMA_QUEUE_DEPTH,
RDMA_TIMEOUT, RDMA_RETRY_CNT, RDMA_SL, RDMA_MTU) are both accepted; setting both to
different values is an error. A bad value raises InvalidArgumentError naming the
variable, the value and what is allowed.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, fields
from typing import Any, Callable, Mapping

from ..errors import InvalidArgumentError

_SIZE = re.compile(r"^\s*(\d+)\s*([KMGT]i?B?|B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
#: the path MTUs verbs know (IBV_MTU_256 .. IBV_MTU_4096)
MTUS = (256, 512, 1024, 2048, 4096)


def parse_size(text: str) -> int:
    """Bytes from ``"4096"``, ``"256MiB"``, ``"1G"``."""
    m = _SIZE.match(text)
    if not m:
        raise ValueError(text)
    unit = (m.group(2) or "").upper()[:1]
    return int(m.group(1)) * _UNITS[unit if unit != "B" else ""]


def _int_in(lo: int, hi: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text, 0)
        if not lo <= value <= hi:
            raise ValueError(text)
        return value
    parse.allowed = f"an integer in [{lo}, {hi}]"  # type: ignore[attr-defined]
    return parse


def _choice(*options: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.strip().lower()
        if value not in options:
            raise ValueError(text)
        return value
    parse.allowed = "one of " + ", ".join(options)  # type: ignore[attr-defined]
    return parse


def _mtu(text: str) -> int:
    value = int(text)
    if value not in MTUS:
        raise ValueError(text)
    return value


_mtu.allowed = "one of " + ", ".join(map(str, MTUS))  # type: ignore[attr-defined]


def _size(text: str) -> int:
    value = parse_size(text)
    if value <= 0:
        raise ValueError(text)
    return value


_size.allowed = "a positive size such as 1048576, 64MiB or 1G"  # type: ignore[attr-defined]


def _seconds(text: str) -> float:
    value = float(text)
    if not 0 < value <= 86400:
        raise ValueError(text)
    return value


_seconds.allowed = "a number of seconds in (0, 86400]"  # type: ignore[attr-defined]


def _name(text: str) -> str:
    if not text.strip():
        raise ValueError(text)
    return text.strip()


_name.allowed = "a non-empty name"  # type: ignore[attr-defined]


def _flag(text: str) -> bool:
    value = text.strip().lower()
    if value not in ("0", "1", "true", "false", "yes", "no", "on", "off"):
        raise ValueError(text)
    return value in ("1", "true", "yes", "on")


_flag.allowed = "1 or 0"  # type: ignore[attr-defined]

def _hosts(text: str) -> tuple[str, ...]:
    hosts = tuple(host.strip() for host in text.split(",") if host.strip())
    if not hosts or len(hosts) > MAX_LINKS or any(not _HOST.match(host) for host in hosts):
        raise ValueError(text)
    return hosts


#: the most links (TENSORVERBS_LINKS) a task has beside the address peers reach it at
MAX_LINKS = 8
_HOST = re.compile(r"^[A-Za-z0-9.:_%-]{1,255}$")
_hosts.allowed = f"1 to {MAX_LINKS} of this host's addresses, comma-separated"  # type: ignore[attr-defined]

# field -> (environment names, the first being the documented one; parser)
_VARIABLES: dict[str, tuple[tuple[str, ...], Callable[[str], object]]] = {
    "provider": (("TENSORVERBS_PROVIDER",), _choice("auto", "soft", "ibverbs")),
    "device": (("RDMA_DEVICE",), _name),
    "port": (("RDMA_DEVICE_PORT",), _int_in(1, 255)),
    "gid_index": (("RDMA_GID_INDEX",), _int_in(0, 255)),
    "pkey_index": (("RDMA_QP_PKEY_INDEX", "RDMA_PKEY"), _int_in(0, 65535)),
    "queue_depth": (("RDMA_QP_QUEUE_DEPTH", "RDMA_QUEUE_DEPTH"), _int_in(1, 65536)),
    "timeout": (("RDMA_QP_TIMEOUT", "RDMA_TIMEOUT"), _int_in(0, 31)),
    "retry_count": (("RDMA_QP_RETRY_COUNT", "RDMA_RETRY_CNT"), _int_in(0, 7)),
    "sl": (("RDMA_QP_SL", "RDMA_SL"), _int_in(0, 7)),
    "mtu": (("RDMA_QP_MTU", "RDMA_MTU"), _mtu),
    "traffic_class": (("RDMA_TRAFFIC_CLASS",), _int_in(0, 255)),
    "same_host": (("TENSORVERBS_SAME_HOST",), _choice("auto", "yes", "no")),
    "ib_windows": (("TENSORVERBS_IB_WINDOWS",), _choice("auto", "type2", "registration")),
    "pool_block_bytes": (("TENSORVERBS_POOL_BLOCK",), _size),
    "pool_limit_bytes": (("TENSORVERBS_POOL_LIMIT",), _size),
    "max_tensor_bytes": (("TENSORVERBS_MAX_TENSOR_BYTES",), _size),
    "message_slots": (("TENSORVERBS_MESSAGE_SLOTS",), _int_in(1, 1024)),
    "hold_seconds": (("TENSORVERBS_HOLD_SECONDS",), _seconds),
    "rendezvous": (("TENSORVERBS_RENDEZVOUS",), _choice("write", "read")),
    "validate": (("RDMA_VERBS_VALIDATE", "TENSORVERBS_VALIDATE"), _flag),
    "links": (("TENSORVERBS_LINKS",), _hosts),
}


@dataclass(frozen=True)
class RdmaConfig:
    """The effective verbs configuration. ``None`` means "choose from the device".
    ``max_tensor_bytes`` bounds the tensors a peer may announce on the "grpc" protocol
    (on "grpc+verbs", the pool limit does). ``links``: the soft provider's further
    addresses of this host, one per network link (a peer with links too stripes large
    tensors over the links both have)."""

    provider: str = "auto"
    device: str | None = None
    port: int | None = None
    gid_index: int | None = None
    pkey_index: int = 0
    queue_depth: int = 1024
    timeout: int = 14
    retry_count: int = 7
    sl: int = 0
    mtu: int | None = None
    traffic_class: int = 0
    same_host: str = "auto"
    ib_windows: str = "auto"
    pool_block_bytes: int = 256 << 20
    pool_limit_bytes: int = 16 << 30
    max_tensor_bytes: int = 16 << 30
    message_slots: int = 16
    hold_seconds: float = 300.0
    rendezvous: str = "write"
    validate: bool = False
    links: tuple[str, ...] = ()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: object) -> "RdmaConfig":
        """Read every variable from ``environ`` (default ``os.environ``); keyword
        arguments override the environment."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for name, (names, parse) in _VARIABLES.items():
            given = [(n, env[n]) for n in names if env.get(n, "") != ""]
            if not given:
                continue
            parsed = []
            for var, text in given:
                try:
                    parsed.append((var, parse(text)))
                except ValueError:
                    raise InvalidArgumentError(
                        f"{var}={text!r} is not valid: expected {getattr(parse, 'allowed', 'another value')}") from None
            if len({v for _, v in parsed}) > 1:
                shown = " and ".join(f"{var}={env[var]!r}" for var, _ in parsed)
                raise InvalidArgumentError(f"{shown} disagree: set one of them")
            values[name] = parsed[0][1]
        values.update(overrides)
        return cls(**values)

    def to_core(self, bind_host: str = "") -> dict[str, Any]:
        """The verbs settings as the native core takes them (-1/0/"" for "from the device");
        ``bind_host``: where the soft provider's listener binds ("": where peers reach it)."""
        return {"provider": self.provider, "device": self.device or "", "port": self.port or 0,
                "gid_index": -1 if self.gid_index is None else self.gid_index,
                "pkey_index": self.pkey_index, "queue_depth": self.queue_depth,
                "timeout": self.timeout, "retry_cnt": self.retry_count, "sl": self.sl,
                "mtu": self.mtu or 0, "traffic_class": self.traffic_class,
                "same_host": self.same_host, "ib_windows": self.ib_windows,
                "bind_host": bind_host, "links": ",".join(self.links)}

    def describe(self) -> list[tuple[str, str, str]]:
        """(variable, effective value, where it came from) for ``tensorverbs info``."""
        rows = []
        for f in fields(self):
            names = _VARIABLES[f.name][0]
            source = next((n for n in names if os.environ.get(n)), "default")
            value = getattr(self, f.name)
            shown = ",".join(value) if isinstance(value, tuple) else str(value)
            rows.append((" | ".join(names), "(from device)" if value is None else shown, source))
        return rows
