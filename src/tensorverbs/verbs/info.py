"""``tensorverbs info``: what the verbs layer sees here and what it would use.

Every provider of the native core with its availability and the reason, the devices and
ports each one sees (state, MTU, link layer, GIDs, as ``ibv_devinfo`` shows them), the
effective RDMA_* configuration and where each value came from, the provider, device, port
and GID that configuration selects, and how the core was built (with or without the
ibverbs provider, and why). :func:`collect` gathers it as plain data (JSON-able),
:func:`render` prints it as tables.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .. import _core
from ..errors import TensorverbsError
from . import topology
from .config import RdmaConfig


def _providers() -> list[dict[str, Any]]:
    return [{"name": name, "available": available, "reason": reason, "devices": devices}
            for name, available, reason, devices in _core.providers()]


def availability(provider: str) -> tuple[bool, str]:
    """(whether the core's verbs ``provider`` can be used here, why or why not)."""
    for name, available, reason, _ in _core.providers():
        if name == provider:
            return available, reason
    build = _core.build_info()
    if provider == "ibverbs" and not build["ibverbs"]:
        return False, f"this build of tensorverbs has no ibverbs provider ({build['ibverbs_reason']})"
    return False, f"unknown verbs provider {provider!r}"


def select(config: RdmaConfig) -> dict[str, Any]:
    """What a context opened with ``config`` would use: ``provider``, and for ibverbs the
    device, port, GID and MTU; raises a TensorverbsError saying why none."""
    settings = config.to_core()
    return _core.select(settings["provider"], settings["device"], settings["port"],
                        settings["gid_index"], settings["mtu"])


def _selection(config: RdmaConfig) -> dict[str, Any]:
    try:
        return select(config)
    except TensorverbsError as exc:  # reported, never fatal here
        return {"provider": None, "error": str(exc)}


def collect(config: RdmaConfig | None = None) -> dict[str, Any]:
    """Providers, devices, configuration and selection as a JSON-able dict. Without
    ``config`` the environment's is read; an invalid one is reported under
    ``config_error`` and the defaults are shown."""
    config_error = None
    if config is None:
        try:
            config = RdmaConfig.from_env()
        except TensorverbsError as exc:
            config_error, config = str(exc), RdmaConfig()
    return {
        "providers": _providers(),
        "build": _core.build_info(),
        "config": [{"variable": v, "value": val, "source": src}
                   for v, val, src in config.describe()],
        "config_error": config_error,
        "selected": _selection(config),
        "topology": _topology(),
    }


def _topology(root: str = "/sys") -> dict[str, Any]:
    """The host's NICs, GPUs and NUMA nodes, and the NIC nearest each GPU and NUMA node
    (an ``error`` instead when sysfs could not be read: reported, never fatal here)."""
    try:
        return _read_topology(root)
    except Exception as exc:
        return {"devices": [], "numa_cpus": {}, "gpus": [], "nodes": [], "error": f"{type(exc).__name__}: {exc}"}


def _read_topology(root: str) -> dict[str, Any]:
    found = topology.read(root)
    devices = [{"kind": kind, "name": d.name, "pci": d.pci, "numa": d.numa, "netdevs": list(d.netdevs)}
               for kind, ds in (("NIC", found.nics), ("GPU", found.gpus)) for d in ds]
    return {"devices": devices, "numa_cpus": found.nodes, **topology.choose(found)}


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return str(n)


def render(info: dict[str, Any], console=None) -> None:
    """Print ``info`` (from :func:`collect`) as tables."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    table = Table(title="verbs providers", title_justify="left")
    for col in ("provider", "available", "reason"):
        table.add_column(col)
    for p in info["providers"]:
        table.add_row(p["name"], "[green]yes[/]" if p["available"] else "[red]no[/]", p["reason"])
    console.print(table)

    gids = Table(title="GIDs", title_justify="left")
    for col in ("device", "port", "index", "GID", "type"):
        gids.add_column(col)
    for p in info["providers"]:
        if not p["devices"]:
            continue
        ports = Table(title=f"{p['name']} devices", title_justify="left")
        for col in ("device", "port", "state", "MTU active/max", "link layer", "max msg",
                    "max QP WRs"):
            ports.add_column(col)
        for d in p["devices"]:
            limits = (_size(d["max_msg_sz"]) if d["max_msg_sz"] else "no limit", str(d["max_qp_wr"]))
            if not d["ports"]:
                ports.add_row(d["name"], "-", "no ports", "", "", *limits)
            for port in d["ports"]:
                state = port["state"] if port["state"] == "ACTIVE" else f"[yellow]{port['state']}[/]"
                ports.add_row(d["name"], str(port["port_num"]), state,
                              f"{port['active_mtu']}/{port['max_mtu']}", port["link_layer"], *limits)
                for index, gid, gid_type in port["gids"]:
                    gids.add_row(d["name"], str(port["port_num"]), str(index), gid, gid_type)
        console.print(ports)
    if gids.row_count:
        console.print(gids)

    config = Table(title="effective configuration", title_justify="left")
    for col in ("variable", "value", "from"):
        config.add_column(col)
    for row in info["config"]:
        config.add_row(row["variable"], row["value"], row["source"])
    console.print(config)
    if info["config_error"]:
        console.print(f"[red]invalid configuration:[/] {info['config_error']} (defaults shown)")

    sel = info["selected"]
    if sel.get("provider") is None:
        console.print(f"[red]no provider would be used:[/] {sel['error']}")
    elif sel.get("error"):
        console.print(f"provider [bold]{sel['provider']}[/], but [red]{sel['error']}[/]")
    elif "device" in sel:
        console.print(f"would use [bold]{sel['provider']}[/]: {sel['device']} port {sel['port']}, "
                      f"GID {sel['gid_index']} ({sel['gid_type']} {sel['gid']}), MTU {sel['mtu']}")
    else:
        console.print(f"would use [bold]{sel['provider']}[/]")
    _render_topology(info["topology"], console, Table)
    build = info["build"]
    ibverbs = "with" if build["ibverbs"] else "without"
    console.print(f"native core: {build['compiler']}, {build['build_type']}, {ibverbs} the ibverbs "
                  f"provider ({build['ibverbs_reason']})")


def _render_topology(topo: dict[str, Any], console: Any, table_type: Any) -> None:
    """The topology part of :func:`render`."""
    if topo.get("error"):
        console.print(f"[yellow]topology: sysfs could not be read:[/] {topo['error']}")
        return
    if not topo["devices"]:
        console.print("topology: no RDMA device or GPU in sysfs")
        return
    devices = table_type(title="topology (sysfs)", title_justify="left")
    for col in ("kind", "device", "PCI", "NUMA node", "interfaces"):
        devices.add_column(col)
    for d in topo["devices"]:
        devices.add_row(d["kind"], d["name"], d["pci"] or "-", str(d["numa"]) if d["numa"] >= 0 else "?",
                        ", ".join(d["netdevs"]))
    console.print(devices)
    chosen = table_type(title="nearest NIC", title_justify="left")
    for col in ("for", "NIC", "why"):
        chosen.add_column(col)
    for g in topo["gpus"]:
        how = f"{g['class']} ({g['hops']} hops): {g['why']}" if g["nic"] else g["why"]
        chosen.add_row(f"GPU {g['gpu']}", g["nic"] or "-", how)
    for n in topo["nodes"]:
        chosen.add_row(f"NUMA node {n['node']}", ", ".join(n["nics"]) or "-", n["why"])
    console.print(chosen)


def main(argv: list[str] | None = None) -> int:
    """``tensorverbs info [--json]``; exits 1 when the configuration is invalid or no
    provider would be usable."""
    parser = argparse.ArgumentParser(prog="tensorverbs info", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the information as JSON")
    args = parser.parse_args(argv)
    info = collect()
    if args.json:
        json.dump(info, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        render(info)
    failed = info["config_error"] or info["selected"].get("provider") is None \
        or info["selected"].get("error")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
