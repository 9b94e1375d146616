"""The soft provider: always available, one device "soft0"."""
from __future__ import annotations

import os

from ...errors import NotFoundError
from ..api import Provider
from ..config import RdmaConfig
from ..model import DeviceAttr, PortAttr
from .context import SoftContext

DEVICE = DeviceAttr(
    name="soft0", provider="soft", max_qp_wr=65536, max_sge=32, max_msg_sz=1 << 31,
    max_mr_size=1 << 40,
    ports=[PortAttr(port_num=1, state="ACTIVE", active_mtu=4096, max_mtu=4096, link_layer="Ethernet")],
    detail="software verbs: shared memory between processes of one host, TCP across hosts")


class SoftProvider(Provider):
    """Verbs in software, with RDMA reliable-connected semantics."""

    name = "soft"

    def availability(self) -> tuple[bool, str]:
        if not hasattr(os, "memfd_create"):
            return False, "needs Linux (memfd_create)"
        return True, "software verbs need no hardware"

    def devices(self) -> list[DeviceAttr]:
        return [DEVICE]

    def open(self, config: RdmaConfig, listen_host: str | None = None) -> SoftContext:
        if config.device not in (None, DEVICE.name):
            raise NotFoundError(f"RDMA_DEVICE={config.device!r}: the soft provider has only "
                                f"{DEVICE.name!r}")
        return SoftContext(DEVICE, config, listen_host or "127.0.0.1")
