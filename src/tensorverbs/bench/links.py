"""``tensorverbs bench links``: tensors between two hosts joined by several links.

For each ``--links`` count N, two network namespaces (hosts) joined by N veth pairs, each
shaped to ``--rate`` both ways (tc token bucket), so that links, not this machine's
memory, are the limit; the soft provider over TCP between them, and with N > 1 both tasks
set ``TENSORVERBS_LINKS`` to their further addresses. A round, at every count in turn (so
that a noisy neighbour slows all alike): the sender offers a ``--size`` tensor, and the
receiver's ``recv(..., timeout=)`` is timed, from its call to its return, as a user
calls it; the bytes are checked after. Then ``--small`` tensors (4 KiB) the same way,
their median round trip against one link's (links must not slow small tensors).

For each count: the median seconds, the rate, and the rate against one link's, measured
in the same run. Needs root (namespaces, tc).
"""
from __future__ import annotations

import argparse
import secrets
import statistics
import sys
from contextlib import ExitStack
from typing import Any

from .. import netns
from ..local_cluster import TaskProcess
from ..verbs.config import parse_size
from . import report

SMALL = 4096


def _pair(stack: ExitStack, links: int, rate: str) -> tuple[TaskProcess, TaskProcess]:
    """The sender and the receiver, each on a host of its own, joined by ``links`` links."""
    a, b = stack.enter_context(netns.linked_pair(links, rate))
    cluster = {"sender": [f"{a.ips[0]}:23456"], "receiver": [f"{b.ips[0]}:23457"]}
    token = secrets.token_hex(16)  # (tasks on routable addresses)

    def env(host: netns.LinkedHost) -> dict[str, str]:
        extra = {"TENSORVERBS_LINKS": ",".join(host.ips[1:])} if links > 1 else {}
        return {"TENSORVERBS_PROVIDER": "soft", "TENSORVERBS_TOKEN": token, **extra}
    sender = TaskProcess(cluster, "sender", 0, "grpc+verbs", env(a), netns=a.name)
    stack.callback(sender.stop)
    receiver = TaskProcess(cluster, "receiver", 0, "grpc+verbs", env(b), netns=b.name)
    stack.callback(receiver.stop)
    return sender, receiver


def _round(sender: TaskProcess, receiver: TaskProcess, step: int, nbytes: int, timeout: float) -> float:
    """Seconds of one recv of ``nbytes`` the sender offered first (bytes checked)."""
    sender.send_pattern("t", "/job:receiver/task:0", step, nbytes, seed=step % 251)
    seconds, same = receiver.timed_recv("t", "/job:sender/task:0", step, nbytes, step % 251, timeout=timeout)
    if not same:
        raise RuntimeError(f"a {nbytes}-byte tensor arrived with other bytes")
    return seconds


def run(counts: list[int], rate: str, nbytes: int, rounds: int, small: int, timeout: float) -> list[dict[str, Any]]:
    """Rounds at each count of links; a row per count."""
    large: dict[int, list[float]] = {n: [] for n in counts}
    smalls: dict[int, list[float]] = {n: [] for n in counts}
    with ExitStack() as stack:
        pairs = {n: _pair(stack, n, rate) for n in counts}
        for n, (sender, receiver) in pairs.items():  # warm: channels set up, pools grown
            _round(sender, receiver, 0, nbytes, timeout)
        step = 1
        for _ in range(rounds):
            for n, (sender, receiver) in pairs.items():
                large[n].append(_round(sender, receiver, step, nbytes, timeout))
                step += 1
        for _ in range(small):
            for n, (sender, receiver) in pairs.items():
                smalls[n].append(_round(sender, receiver, step, SMALL, timeout))
                step += 1
    base = statistics.median(large[counts[0]])
    small_base = statistics.median(smalls[counts[0]]) if small else None
    rows = []
    for n in counts:
        median = statistics.median(large[n])
        row: dict[str, Any] = {"links": n, "rate": rate, "bytes": nbytes, "seconds": report.summarize(large[n]),
                               "gbit_s": nbytes * 8 / median / 1e9, "vs_first": base / median}
        if small:
            row["small_us"] = report.summarize([s * 1e6 for s in smalls[n]])
            row["small_vs_first"] = statistics.median(smalls[n]) / small_base if small_base else None
        rows.append(row)
    return rows


def goals(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Issue 40's goals: 2 links >= 1.8x one, 4 links >= 3.4x."""
    wanted = {2: 1.8, 4: 3.4}
    return [{"goal": f"{row['links']} links >= {wanted[row['links']]}x one link's rate",
             "measured": f"{row['vs_first']:.2f}x", "met": row["vs_first"] >= wanted[row["links"]]}
            for row in rows if row["links"] in wanted and rows[0]["links"] == 1]


def show(rows: list[dict[str, Any]]) -> None:
    """Print the rows as a table."""
    report.console.print(report.table(f"{report.human_size(rows[0]['bytes'])} over links of {rows[0]['rate']} each",
                 ["links", "median s", "Gbit/s", "vs the first", "4 KiB median us", "4 KiB vs the first"],
                 [[row["links"], f"{row['seconds']['median']:.3f}", f"{row['gbit_s']:.2f}", f"{row['vs_first']:.2f}x",
                   f"{row['small_us']['median']:.0f}" if "small_us" in row else "-",
                   f"{row['small_vs_first']:.2f}x" if row.get("small_vs_first") else "-"] for row in rows]))


def parser() -> argparse.ArgumentParser:
    """The command line of ``tensorverbs bench links``."""
    p = argparse.ArgumentParser(prog="tensorverbs bench links", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--links", type=int, nargs="+", default=[1, 2, 4], help="link counts (default 1 2 4)")
    p.add_argument("--rate", default="1gbit", help="each link's rate, in tc's units (default 1gbit)")
    p.add_argument("--size", default="64MiB", help="the large tensor (default 64MiB)")
    p.add_argument("--rounds", type=int, default=5, help="large tensors per count (default 5)")
    p.add_argument("--small", type=int, default=50, help="4 KiB tensors per count (default 50; 0: none)")
    p.add_argument("--timeout", type=float, default=120.0, help="each recv's timeout in seconds (default 120)")
    p.add_argument("--json", default="links.json", help="where the results go (default links.json)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    p = parser()
    args = p.parse_args(argv)
    if (why := netns.unavailable_reason()) is not None:
        p.error(why)
    if min(args.links) < 1 or max(args.links) > 8 or args.rounds < 1 or args.small < 0:
        p.error("give --links from 1 to 8, --rounds >= 1 and --small >= 0")
    try:
        netns.rate_bits(args.rate)
        nbytes = parse_size(args.size)
    except ValueError as exc:
        p.error(str(exc))
    rows = run(sorted(set(args.links)), args.rate, nbytes, args.rounds, args.small, args.timeout)
    show(rows)
    if goals_ := goals(rows):
        report.console.print(report.table("issue 40's goals", ["goal", "measured", ""], report.goal_rows(goals_)))
    return report.conclude(args.json, {"results": rows, "goals": goals(rows)}, ["links", *argv])
