"""The RDMA device a task uses when ``RDMA_DEVICE`` is not set: of the devices with an
active port, the first on the NUMA node this process runs on (the host's topology,
:func:`.topology.local_nic`); where that is not known, or only one device is active, the
core's own choice (the first active device)."""
from __future__ import annotations

from .. import _core
from .topology import local_nic


def default_device(provider: str) -> str:
    """The device name for the core ("": the core's own choice) under ``provider``."""
    if provider not in ("ibverbs", "auto"):
        return ""
    active = [device["name"] for name, available, _, devices in _core.providers()
              if name == "ibverbs" and available for device in devices
              if any(port["state"] == "ACTIVE" for port in device["ports"])]
    if len(active) < 2:
        return ""
    try:
        return local_nic(active) or ""
    except OSError:  # sysfs unreadable: the core's choice
        return ""
