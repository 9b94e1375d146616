"""Which device, port, GID and MTU to use, from what the devices report and RDMA_* settings.

Pure functions over :class:`~tensorverbs.verbs.model.DeviceAttr`, so the rules are tested
without RDMA hardware. Without settings the choice is the first device with an active
port, its first active port, and on Ethernet (RoCE) a RoCEv2 GID, preferring one that
carries an IPv4 address (routable between hosts) over an IPv6 link-local one.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from ...errors import InvalidArgumentError, NotFoundError, UnavailableError
from ..config import RdmaConfig
from ..model import DeviceAttr, PortAttr

ACTIVE = "ACTIVE"
ETHERNET = "Ethernet"


@dataclass(frozen=True)
class Choice:
    """The port and addressing a context uses."""

    device: DeviceAttr
    port: PortAttr
    gid_index: int
    gid: str
    gid_type: str
    mtu: int  # bytes: RDMA_QP_MTU or the port's active MTU


def _port_list(device: DeviceAttr) -> str:
    return ", ".join(f"port {p.port_num} {p.state}" for p in device.ports) or "no ports"


def describe_ports(devices: list[DeviceAttr]) -> str:
    """``"rxe0 port 1 ACTIVE; mlx5_0 port 1 DOWN"`` for messages."""
    return "; ".join(f"{d.name} {_port_list(d)}" for d in devices) or "no devices"


def _choose_device(devices: list[DeviceAttr], config: RdmaConfig) -> DeviceAttr:
    if config.device is not None:
        for device in devices:
            if device.name == config.device:
                return device
        names = ", ".join(d.name for d in devices) or "none"
        raise NotFoundError(
            f"RDMA_DEVICE={config.device!r} does not exist; RDMA devices here: {names}")
    for device in devices:
        if any(p.state == ACTIVE and (config.port in (None, p.port_num)) for p in device.ports):
            return device
    if config.port is not None:
        raise NotFoundError(
            f"no RDMA device has an active port RDMA_DEVICE_PORT={config.port}: "
            f"{describe_ports(devices)}")
    raise UnavailableError(f"no RDMA device has an active port: {describe_ports(devices)}")


def _choose_port(device: DeviceAttr, config: RdmaConfig) -> PortAttr:
    if config.port is None:
        for port in device.ports:
            if port.state == ACTIVE:
                return port
        raise InvalidArgumentError(
            f"RDMA_DEVICE={device.name!r} has no active port ({_port_list(device)})")
    port = next((p for p in device.ports if p.port_num == config.port), None)
    if port is None:
        have = ", ".join(str(p.port_num) for p in device.ports) or "none"
        raise NotFoundError(
            f"RDMA_DEVICE_PORT={config.port} does not exist on {device.name} (its ports: {have})")
    if port.state != ACTIVE:
        active = ", ".join(str(p.port_num) for p in device.ports if p.state == ACTIVE) or "none"
        raise InvalidArgumentError(
            f"RDMA_DEVICE_PORT={config.port} of {device.name} is {port.state}, not ACTIVE "
            f"(active ports: {active})")
    return port


def gid_rank(gid: str, gid_type: str) -> tuple[int, int]:
    """Sort key of a GID on a RoCE port: RoCEv2 before RoCEv1, IPv4-carrying before
    link-local IPv6 before other IPv6."""
    try:
        address = ipaddress.IPv6Address(gid)
    except ValueError:
        kind = 3
    else:
        kind = 0 if address.ipv4_mapped else 1 if address.is_link_local else 2
    return (0 if gid_type == "RoCEv2" else 1, kind)


def _choose_gid(device: DeviceAttr, port: PortAttr, config: RdmaConfig) -> tuple[int, str, str]:
    gids = port.gids
    if config.gid_index is not None:
        for index, gid, gid_type in gids:
            if index == config.gid_index:
                return index, gid, gid_type
        valid = ", ".join(f"{i} ({t} {g})" for i, g, t in gids) or "none"
        raise InvalidArgumentError(
            f"RDMA_GID_INDEX={config.gid_index} is out of range for {device.name} port "
            f"{port.port_num}: valid GID indices are {valid}")
    if not gids:
        raise UnavailableError(
            f"{device.name} port {port.port_num} has no GID (on RoCE: is its network "
            "interface up with an address?)")
    if port.link_layer != ETHERNET:
        return min(gids)
    return min(gids, key=lambda g: (gid_rank(g[1], g[2]), g[0]))


def _choose_mtu(device: DeviceAttr, port: PortAttr, config: RdmaConfig) -> int:
    if config.mtu is None:
        return port.active_mtu
    if config.mtu > port.active_mtu:
        raise InvalidArgumentError(
            f"RDMA_QP_MTU={config.mtu} exceeds the active MTU {port.active_mtu} of "
            f"{device.name} port {port.port_num}")
    return config.mtu


def choose(devices: list[DeviceAttr], config: RdmaConfig) -> Choice:
    """The device, port, GID and MTU ``config`` selects among ``devices``."""
    if not devices:
        raise UnavailableError("no RDMA devices")
    device = _choose_device(devices, config)
    port = _choose_port(device, config)
    gid_index, gid, gid_type = _choose_gid(device, port, config)
    return Choice(device, port, gid_index, gid, gid_type, _choose_mtu(device, port, config))


def path_mtu(local: int, remote: int) -> int:
    """The path MTU both ends can carry: the smaller one (0 means "not told")."""
    return min(m for m in (local, remote) if m) if (local or remote) else 0
