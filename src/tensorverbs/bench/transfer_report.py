"""The tables and the plot of ``tensorverbs bench transfer``'s results (see
:mod:`.transfer`)."""
from __future__ import annotations

from typing import Callable

from rich.markup import escape
from rich.table import Table

from . import report
from .contenders.base import CALLS, FLIGHT_CALLS, IDLE_GAP
from .transfer_goals import SMALL, find, find_call


def _cpu(r: dict) -> str:
    """A row's µs of CPU per transfer: sender/receiver."""
    return "/".join("-" if us is None else f"{us:.3g}" if us < 100 else f"{us:.0f}"
                    for us in (r["cpu_us"]["sender"], r["cpu_us"]["receiver"]))


def _bad(r: dict) -> str:
    return " [red]BAD[/]" if r["verified"] is False else ""


def _flight_row(flight: list[dict], name: str, call: str) -> dict | None:
    """The in-flight row of ``name`` asked for with ``call`` (None if it did not run)."""
    return next((r for r in flight if r["contender"] == name and r["call"] == call), None)


def _flight_table(flight: list[dict], names: list[str], count: int, nbytes: int) -> Table:
    """The in-flight rates, each way: n/a for the contenders that cannot keep transfers in
    flight so."""
    rows = [[name, *(f"{r['tensors_per_s']:,.0f}{_bad(r)} ({_cpu(r)})" if (r := _flight_row(flight, name, call))
                     else "n/a" for call in FLIGHT_CALLS)] for name in names]
    return report.table(f"{report.human_size(nbytes)} tensors with {count:,} recvs in flight: tensors/s "
                        "(median) (CPU per tensor, µs: sender/receiver)", ["", *FLIGHT_CALLS], rows)


def show(result: dict) -> None:
    """Print the results as tables."""
    results, flight = result["results"], result["in_flight"]
    sizes = result["settings"]["sizes"]
    names = [n for n, s in result["contenders"].items()
             if s["available"] and any(r["contender"] == n for r in results + flight)]
    heads = ["", *(report.human_size(n) for n in sizes)]

    def rows(cell: Callable[[dict], str]) -> list[list[str]]:
        return [[name, *(cell(r) if (r := find(results, name, n)) else "-" for n in sizes)]
                for name in names]
    def bandwidth(r: dict) -> str:
        spread = (r["gbps_p75"] - r["gbps_p25"]) / 2 / r["gbps"]
        return f"{r['gbps']:.3g} ±{spread:.0%}{_bad(r)}"
    latency = rows(lambda r: f"{r['latency_us']['median']:.0f}/{r['latency_us']['p99']:.0f}")
    con = report.console
    con.print(report.table("bandwidth, GB/s: median ±half the p25-p75 range", heads, rows(bandwidth)))
    con.print(report.table("time per transfer (a round trip), µs: median/p99", heads, latency))
    con.print(report.table("CPU per transfer, µs: sender/receiver", heads, rows(_cpu)))
    if result["settings"]["in_flight"]:
        con.print(_flight_table(flight, names, result["settings"]["in_flight"],
                                result["settings"].get("flight_bytes", SMALL)))
    if calls := result["calls"]:
        called = [n for n in names if any(r["contender"] == n for r in calls)]
        cells = [[name, *(f"{r['latency_us']['median']:.0f}/{r['latency_us']['p99']:.0f} ({_cpu(r)})"
                          if (r := find_call(calls, name, call)) else "n/a" for call in CALLS)]
                 for name in called]
        con.print(report.table(
            f"{report.human_size(SMALL)} as applications call it: µs median/p99 (CPU µs "
            f"sender/receiver); idle {IDLE_GAP * 1e3:g} ms before each 'recv after idle'",
            ["", *CALLS], cells))
    con.print(report.table("goals", ["goal", "measured", ""], report.goal_rows(result["goals"])))
    for name, s in result["contenders"].items():
        if not s["available"] or s.get("failed"):
            con.print(f"[yellow]{name}[/] did not run: {escape(s.get('failed') or s['about'])}")


def plot(result: dict, path: str) -> None:
    """Write a log-log PNG of bandwidth against size."""
    series, limits = {}, []
    for name, s in result["contenders"].items():
        rows = [r for r in result["results"] if r["contender"] == name]
        if rows:
            series[name] = ([r["bytes"] for r in rows], [r["gbps"] for r in rows])
            if s["kind"] == "limit":
                limits.append(name)
    sizes = result["settings"]["sizes"]
    report.plot(path, "receiver-initiated transfer between two processes", "tensor size",
                "GB/s (median)", series, log=True, dashed=limits,
                xticks={n: report.human_size(n) for n in sizes})
