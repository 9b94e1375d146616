"""The host's topology as sysfs tells it: its RDMA devices (NICs), its GPUs and NUMA nodes,
where each sits on the PCIe tree, and which NIC is nearest each GPU and each NUMA node.

A device's place is its directory under ``/sys/devices``: the PCIe root complex
(``pci0000:3a``) and the bridges and switch ports down to it. Two devices' distance is
classed as NCCL classes it, nearest first:

- ``PIX``: through one PCIe switch (their paths part below one switch's upstream port);
- ``PXB``: through several switches, under one root port;
- ``PHB``: through the host bridge (one root complex, different root ports);
- ``NODE``: across root complexes of one NUMA node;
- ``SYS``: across NUMA nodes;
- ``unknown``: a device without a PCIe place (soft-RoCE's rxe, a NIC seen through a VM's
  virtual bus without one).

Each GPU gets the NIC of the nearest class (fewest hops within it); GPUs with equal
choices are spread across them in PCI bus order, so that two GPUs behind one switch with
two NICs take one each. Each NUMA node gets the NICs on it (all NICs when none is).
:func:`read` reads a sysfs tree (the host's, or a synthetic one in tests), :func:`choose`
makes the choices, and ``tensorverbs info`` shows both.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
import re
from typing import Any

#: the distance classes, nearest first
CLASSES = ("PIX", "PXB", "PHB", "NODE", "SYS", "unknown")
WHY = {"PIX": "through one PCIe switch", "PXB": "through several PCIe switches under one root port",
       "PHB": "through the PCIe host bridge", "NODE": "across root complexes of one NUMA node",
       "SYS": "across NUMA nodes", "unknown": "no PCIe place known for one of them"}
#: PCI classes of GPUs (3D and VGA controllers) and NVIDIA's vendor id
GPU_CLASSES, NVIDIA = ("0x0302", "0x0300"), "0x10de"
#: a PCIe root complex's directory (pci0000:00, pci7870:00) and a PCI function (0000:3b:00.0)
_ROOT = re.compile(r"pci[0-9a-f]{4}:[0-9a-f]{2}$")
_FUNCTION = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


@dataclass(frozen=True)
class Device:
    """A NIC or a GPU: its name, PCI address (None without one), its path of PCIe
    components from the root complex down (empty without one), its NUMA node (-1:
    unknown) and, for a NIC, its network interfaces."""

    name: str
    pci: str | None
    path: tuple[str, ...]
    numa: int
    netdevs: tuple[str, ...] = ()


@dataclass
class Topology:
    """What sysfs showed: NICs, GPUs (in PCI bus order), NUMA nodes (node -> CPUs)."""

    nics: list[Device] = field(default_factory=list)
    gpus: list[Device] = field(default_factory=list)
    nodes: dict[int, str] = field(default_factory=dict)


def distance(a: Device, b: Device) -> tuple[str, int]:
    """(the class of the way from ``a`` to ``b``, the PCIe hops along it)."""
    if not a.path or not b.path:
        return "unknown", 0
    common = 0
    for x, y in zip(a.path, b.path):
        if x != y:
            break
        common += 1
    hops = len(a.path) + len(b.path) - 2 * common
    if common == 0:  # different root complexes (a NUMA node unknown on both: one node)
        return ("NODE" if a.numa == b.numa else "SYS"), hops
    if common == 1:  # parted at the root complex: different root ports
        return "PHB", hops
    # below one root port: up to a switch's downstream ports and down again is 4 hops
    return ("PIX" if hops <= 4 else "PXB"), hops


def choose(topology: Topology) -> dict[str, Any]:
    """The NIC for each GPU and the NICs for each NUMA node, each with the reason:
    ``{"gpus": [{gpu, nic, class, hops, why}], "nodes": [{node, nics, why}]}``."""
    uses: dict[str, int] = {nic.name: 0 for nic in topology.nics}
    gpus: list[dict[str, Any]] = []
    for gpu in topology.gpus:
        if not topology.nics:
            gpus.append({"gpu": gpu.name, "nic": None, "class": None, "hops": None, "why": "no RDMA device"})
            continue
        ranked = sorted((CLASSES.index(cls), hops, nic.name)
                        for nic in topology.nics for cls, hops in [distance(gpu, nic)])
        best = [r for r in ranked if r[:2] == ranked[0][:2]]
        _, hops, name = min(best, key=lambda r: (uses[r[2]], r[2]))
        uses[name] += 1
        cls = CLASSES[ranked[0][0]]
        shared = f"; {len(best)} as near, spread in PCI order" if len(best) > 1 else ""
        gpus.append({"gpu": gpu.name, "nic": name, "class": cls, "hops": hops, "why": WHY[cls] + shared})
    nodes: list[dict[str, Any]] = []
    for node in sorted(topology.nodes):
        local = [nic.name for nic in topology.nics if nic.numa == node]
        why = ("on this NUMA node" if local else "none on this NUMA node: every NIC" if topology.nics
               else "no RDMA device")
        nodes.append({"node": node, "nics": local or [nic.name for nic in topology.nics], "why": why})
    return {"gpus": gpus, "nodes": nodes}


def read(root: str | os.PathLike[str] = "/sys") -> Topology:
    """The topology of the sysfs tree at ``root``; missing or unreadable parts are left
    out."""
    root = Path(root)
    topology = Topology()
    for entry in _sorted_dir(root / "class" / "infiniband"):
        pci, path = _place(root, entry / "device")
        netdevs = tuple(n.name for n in _sorted_dir(entry / "device" / "net"))
        parent = _text(entry / "parent")  # soft-RoCE: the interface it runs over
        if not netdevs and parent:
            netdevs = (parent,)
        topology.nics.append(Device(entry.name, pci, path, _numa(entry / "device"), netdevs))
    for entry in _sorted_dir(root / "bus" / "pci" / "devices"):
        if (_text(entry / "vendor") == NVIDIA and _text(entry / "class").startswith(GPU_CLASSES)
                and not (entry / "physfn").exists()):  # (a virtual function is no GPU of its own)
            pci, path = _place(root, entry)
            topology.gpus.append(Device(entry.name, pci, path, _numa(entry)))
    for entry in _sorted_dir(root / "devices" / "system" / "node"):
        if re.fullmatch(r"node[0-9]+", entry.name):
            topology.nodes[int(entry.name[4:])] = _text(entry / "cpulist")
    return topology


def _place(root: Path, link: Path) -> tuple[str | None, tuple[str, ...]]:
    """(PCI address, PCIe path from the root complex) of the device ``link`` leads to:
    from the first root complex on its path (a VM's virtual bus may come first) down to
    its last PCI function (a sub-function or virtio device below it is that function's)."""
    try:
        if not link.exists():
            return None, ()
        parts = link.resolve().parts
    except (OSError, RuntimeError):  # unreadable, a symlink loop
        return None, ()
    start = next((i for i, part in enumerate(parts) if _ROOT.match(part)), None)
    if start is None:
        return None, ()
    below = parts[start:]
    last = max((i for i, part in enumerate(below) if _FUNCTION.match(part)), default=None)
    if last is None:
        return None, ()
    return below[last], tuple(below[:last + 1])


def _numa(device: Path) -> int:
    try:
        return int(_text(device / "numa_node"))
    except ValueError:
        return -1


def _text(path: Path) -> str:
    try:
        return path.read_text().strip()
    except (OSError, ValueError):  # unreadable, not text
        return ""


def _sorted_dir(path: Path) -> list[Path]:
    try:
        return sorted(path.iterdir())
    except OSError:
        return []
