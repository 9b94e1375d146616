"""``tensorverbs info``: what the verbs layer sees here and what it would use.

Every provider with its availability and the reason, the devices and ports each one
sees (state, MTU, link layer, GIDs, as ``ibv_devinfo`` shows them), the effective RDMA_*
configuration and where each value came from, and the provider, device, port and GID
that configuration selects. :func:`collect` gathers it as plain data (JSON-able),
:func:`render` prints it as tables.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from typing import Any

from ..errors import TensorverbsError
from .config import RdmaConfig
from .registry import PROVIDERS, choose_provider, get_provider


def _provider_entry(name: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": name, "available": False, "reason": "", "devices": []}
    try:
        provider = get_provider(name)
        entry["available"], entry["reason"] = provider.availability()
        entry["devices"] = [asdict(d) for d in provider.devices()]
    except Exception as exc:  # a broken provider is reported, never fatal here
        entry["reason"] = entry["reason"] or f"{type(exc).__name__}: {exc}"
        entry["error"] = f"{type(exc).__name__}: {exc}"
    return entry


def _selection(config: RdmaConfig, providers: list[dict[str, Any]]) -> dict[str, Any]:
    try:
        provider = choose_provider(config)
    except Exception as exc:  # reported, never fatal here
        text = str(exc) if isinstance(exc, TensorverbsError) else f"{type(exc).__name__}: {exc}"
        return {"provider": None, "error": text}
    chosen: dict[str, Any] = {"provider": provider.name}
    if provider.name == "ibverbs":
        from .ibverbs.selection import choose
        from .model import DeviceAttr, PortAttr

        entry = next(p for p in providers if p["name"] == "ibverbs")
        devices = [DeviceAttr(**{**d, "ports": [PortAttr(**p) for p in d["ports"]]})
                   for d in entry["devices"]]
        try:
            c = choose(devices, config)
        except TensorverbsError as exc:
            chosen["error"] = str(exc)
        else:
            chosen.update(device=c.device.name, port=c.port.port_num, gid_index=c.gid_index,
                          gid=c.gid, gid_type=c.gid_type, mtu=c.mtu)
    return chosen


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
    providers = [_provider_entry(name) for name in PROVIDERS]
    return {
        "providers": providers,
        "config": [{"variable": v, "value": val, "source": src}
                   for v, val, src in config.describe()],
        "config_error": config_error,
        "selected": _selection(config, providers),
    }


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
                    "max QP WRs", "max SGEs"):
            ports.add_column(col)
        for d in p["devices"]:
            limits = (_size(d["max_msg_sz"]), str(d["max_qp_wr"]), str(d["max_sge"]))
            if not d["ports"]:
                ports.add_row(d["name"], "-", d["detail"] or "no ports", "", "", *limits)
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
