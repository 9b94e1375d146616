"""The ibverbs provider: availability, device listing and opening, from RDMA_* settings."""
from __future__ import annotations

from ...errors import TensorverbsError, UnavailableError
from ..api import Provider
from ..config import RdmaConfig
from ..model import DeviceAttr
from . import _pyverbs
from .device import IbverbsContext, open_context
from .discovery import scan
from .selection import ACTIVE, choose, describe_ports


class IbverbsProvider(Provider):
    """Real RDMA devices (InfiniBand, RoCE, soft-RoCE) through rdma-core's pyverbs."""

    name = "ibverbs"

    def availability(self) -> tuple[bool, str]:
        reason = _pyverbs.missing_reason()
        if reason:
            return False, reason
        try:
            devices = scan()
        except TensorverbsError as exc:
            return False, f"no RDMA devices ({exc.message})"
        if not devices:
            return False, "no RDMA devices"
        active = [(d, p) for d in devices for p in d.ports if p.state == ACTIVE]
        if not active:
            return False, f"no active port ({describe_ports(devices)})"
        device, port = active[0]
        return True, (f"{len(devices)} device(s); {device.name} port {port.port_num} ACTIVE, "
                      f"{port.link_layer}, MTU {port.active_mtu}")

    def devices(self) -> list[DeviceAttr]:
        if _pyverbs.missing_reason():
            return []
        return scan()

    def open(self, config: RdmaConfig, listen_host: str | None = None) -> IbverbsContext:
        """Open the device, port and GID ``config`` selects (``listen_host`` is unused:
        the device carries the traffic)."""
        if _pyverbs.missing_reason():
            _pyverbs.load()  # raises UnavailableError with the import error
        devices = scan()
        if not devices:
            raise UnavailableError("no RDMA devices (is an RDMA driver loaded? ibv_devices "
                                   "lists what libibverbs sees)")
        return open_context(choose(devices, config), config)
