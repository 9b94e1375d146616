"""``tensorverbs bench transfer``: receiver-initiated transfers of float32 tensors between
two processes, for every transport available here, beside the limits measured in the
same run (a memcpy in one process, raw sockets).

Every contender runs in its own pair of processes, all started before the timing. For
each size, every contender first transfers a warm-up round (its first tensor's bytes are
checked), then the timed rounds alternate between the contenders, so that a noisy
neighbour slows them all alike. A transfer is timed in the receiving process from the
request to the tensor in hand: at small sizes that is a round trip.

    tensorverbs bench transfer --max-size 256MiB --rounds 8 --plot transfer.png
"""
from __future__ import annotations

import argparse
import sys
from typing import Any, Callable

from rich.markup import escape

from ..verbs.config import parse_size
from . import report
from .contenders import Contender, Pair, by_name
from .peer import PeerError

#: the tensorverbs contender the goals are about, and what it is compared with
SUBJECT = "grpc+verbs"
GOAL_BYTES = 64 << 20
LATENCY_BYTES = 4 << 10


def default_sizes(smallest: int, largest: int) -> list[int]:
    """Sizes from ``smallest`` to ``largest``, each four times the one before."""
    sizes, n = [], smallest
    while n <= largest:
        sizes.append(n)
        n *= 4
    if sizes[-1] != largest:
        sizes.append(largest)
    return sizes


def transfers_per_round(nbytes: int, budget: int, most: int) -> int:
    """About ``budget`` bytes per round, at least 2 transfers and at most ``most``."""
    return max(2, min(most, budget // nbytes))


def start(contenders: list[Contender], note: Callable[[str], None]) -> tuple[list[Pair], dict]:
    """Start every available contender (all at once); returns the pairs that came up and
    each contender's status."""
    launched, status = [], {}
    for contender in contenders:
        ok, about = contender.availability()
        status[contender.name] = {"kind": contender.kind, "path": contender.path,
                                  "available": ok, "about": about}
        if ok:
            launched.append(contender.start())
        else:
            note(f"skipping {contender.name}: {escape(about)}")
    pairs = []
    for pair in launched:
        try:
            pair.connect()
            pair.pause()
            pairs.append(pair)
        except PeerError as exc:
            status[pair.contender.name].update(failed=f"failed to start: {exc}")
            note(f"[red]{pair.contender.name} failed to start[/]: {escape(str(exc))}")
    return pairs, status


def measure(pairs: list[Pair], sizes: list[int], rounds: int, warmup: int, budget: int,
            most: int, status: dict, advance: Callable[[], None] = lambda: None) -> list[dict]:
    """Run the sweep; one result per (contender, size) that ran."""
    samples: dict[tuple[str, int], list[float]] = {}
    verified: dict[tuple[str, int], bool | None] = {}
    live = list(pairs)
    step = 0

    def run(pair: Pair, nbytes: int, count: int, verify: bool) -> None:
        nonlocal step
        name = pair.contender.name
        pair.resume()
        try:
            out = pair.run(nbytes, count, step, verify)
            pair.pause()
        except PeerError as exc:
            status[name].update(failed=str(exc))
            live.remove(pair)
            pair.close()
            return
        finally:
            step += count
        if verify:
            verified[name, nbytes] = out["ok"]
        else:
            samples.setdefault((name, nbytes), []).extend(out["seconds"])

    for nbytes in sizes:
        count = transfers_per_round(nbytes, budget, most)
        for pair in list(live):
            for _ in range(warmup):
                run(pair, nbytes, count, verify=True)
        advance()
        for r in range(rounds):
            order = live[r % len(live):] + live[:r % len(live)] if live else []
            for pair in order:
                if pair in live:
                    run(pair, nbytes, count, verify=False)
            advance()
    results = []
    for pair in pairs:
        name = pair.contender.name
        for nbytes in sizes:
            if (name, nbytes) not in samples:
                continue
            s = report.summarize(samples[name, nbytes])
            results.append({
                "contender": name, "bytes": nbytes, "verified": verified.get((name, nbytes)),
                "seconds": s, "gbps": nbytes / s["median"] / 1e9,
                "gbps_p25": nbytes / s["p75"] / 1e9, "gbps_p75": nbytes / s["p25"] / 1e9,
                "latency_us": {"median": s["median"] * 1e6, "p99": s["p99"] * 1e6}})
    return results


def _find(results: list[dict], name: str, nbytes: int) -> dict | None:
    return next((r for r in results if r["contender"] == name and r["bytes"] == nbytes), None)


def goals(results: list[dict]) -> list[dict]:
    """The issue's goals that this run's contenders and sizes can judge."""
    out = []
    subject = _find(results, SUBJECT, GOAL_BYTES)
    size = report.human_size(GOAL_BYTES)
    if subject is not None:
        for other, goal, check in (
                ("memcpy", "≥ 0.8x memcpy", lambda r: r >= 0.8),
                ("grpc", "≥ 10x grpc", lambda r: r >= 10),
                ("tensorpipe", "ahead of tensorpipe", lambda r: r > 1)):
            base = _find(results, other, GOAL_BYTES)
            if base is not None:
                ratio = subject["gbps"] / base["gbps"]
                out.append({"goal": f"{size} same host: {SUBJECT} {goal}",
                            "measured": f"{subject['gbps']:.2f} vs {base['gbps']:.2f} GB/s = {ratio:.2f}x",
                            "ratio": ratio, "met": check(ratio)})
    for name, raw in ((SUBJECT, "raw unix"), (f"{SUBJECT} tcp", "raw tcp")):
        mine, base = _find(results, name, LATENCY_BYTES), _find(results, raw, LATENCY_BYTES)
        if mine is not None and base is not None:
            a, b = mine["latency_us"]["median"], base["latency_us"]["median"]
            out.append({"goal": f"{report.human_size(LATENCY_BYTES)} round trip: {name} ≤ 2x {raw}",
                        "measured": f"{a:.0f} vs {b:.0f} µs = {a / b:.1f}x", "ratio": a / b,
                        "met": a / b <= 2})
    return out


def show(result: dict) -> None:
    """Print the results as tables."""
    results, names = result["results"], [n for n, s in result["contenders"].items() if s["available"]]
    sizes = result["settings"]["sizes"]
    names = [n for n in names if any(r["contender"] == n for r in results)]
    heads = ["", *(report.human_size(n) for n in sizes)]

    def rows(cell: Callable[[dict], str]) -> list[list[str]]:
        return [[name, *(cell(r) if (r := _find(results, name, n)) else "-" for n in sizes)]
                for name in names]
    def bandwidth(r: dict) -> str:
        spread = (r["gbps_p75"] - r["gbps_p25"]) / 2 / r["gbps"]
        return f"{r['gbps']:.3g} ±{spread:.0%}" + (" [red]BAD[/]" if r["verified"] is False else "")
    latency = rows(lambda r: f"{r['latency_us']['median']:.0f}/{r['latency_us']['p99']:.0f}")
    con = report.console
    con.print(report.table("bandwidth, GB/s: median ±half the p25-p75 range", heads, rows(bandwidth)))
    con.print(report.table("time per transfer (a round trip), µs: median/p99", heads, latency))
    if result["goals"]:
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


def parser() -> argparse.ArgumentParser:
    """The command-line arguments of ``tensorverbs bench transfer``."""
    p = argparse.ArgumentParser(prog="tensorverbs bench transfer", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--min-size", default="4KiB", help="smallest tensor (default 4KiB)")
    p.add_argument("--max-size", default="64MiB", help="largest tensor (default 64MiB; up to 256MiB)")
    p.add_argument("--sizes", help="comma-separated sizes instead of 4x steps from min to max")
    p.add_argument("--rounds", type=int, default=8, help="timed rounds per size (default 8)")
    p.add_argument("--warmup", type=int, default=1, help="untimed rounds first (default 1)")
    p.add_argument("--round-bytes", default="64MiB",
                   help="about this much per contender and round (default 64MiB)")
    p.add_argument("--max-transfers", type=int, default=100,
                   help="at most this many transfers per contender and round (default 100)")
    p.add_argument("--contenders", help="comma-separated names (default: all available): "
                   + ", ".join(c.name for c in by_name()))
    p.add_argument("--json", default="transfer.json", help="where the results go (default transfer.json)")
    p.add_argument("--plot", nargs="?", const="transfer.png", metavar="PNG",
                   help="also plot bandwidth against size (default file transfer.png)")
    return p


def _sizes(p: argparse.ArgumentParser, args: argparse.Namespace) -> list[int]:
    try:
        if args.sizes:
            sizes = [parse_size(s) for s in args.sizes.split(",") if s.strip()]
        else:
            sizes = default_sizes(parse_size(args.min_size), parse_size(args.max_size))
    except ValueError as exc:
        p.error(f"cannot read the size {exc}")
    if not sizes or any(n <= 0 or n % 4 for n in sizes):
        p.error("sizes must be positive multiples of 4 bytes (float32 tensors)")
    return sizes


def run(contenders: list[Contender], sizes: list[int], rounds: int = 8, warmup: int = 1,
        round_bytes: int = 64 << 20, max_transfers: int = 100) -> dict[str, Any]:
    """Start the contenders, run the sweep with a progress bar, stop them; the result."""
    with report.progress() as bar:
        pairs, status = start(contenders, bar.console.print)
        task = bar.add_task("transfers", total=len(sizes) * (rounds + 1))
        try:
            results = measure(pairs, sizes, rounds, warmup, round_bytes, max_transfers, status,
                              lambda: bar.advance(task))
        finally:
            for pair in pairs:
                pair.close()
    settings = {"sizes": sizes, "rounds": rounds, "warmup_rounds": warmup,
                "round_bytes": round_bytes, "max_transfers": max_transfers, "dtype": "float32"}
    return {"benchmark": "transfer", "settings": settings, "contenders": status,
            "results": results, "goals": goals(results)}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    p = parser()
    args = p.parse_args(argv)
    sizes = _sizes(p, args)
    if args.rounds < 1 or args.warmup < 0 or args.max_transfers < 1:
        p.error("give --rounds >= 1, --warmup >= 0 and --max-transfers >= 1")
    try:
        contenders = by_name(args.contenders.split(",") if args.contenders else None)
        round_bytes = parse_size(args.round_bytes)
    except ValueError as exc:
        p.error(str(exc))
    result = run(contenders, sizes, args.rounds, args.warmup, round_bytes, args.max_transfers)
    show(result)
    plotted = report.save(result, ["transfer", *argv], args.json, args.plot, plot)
    bad = [r for r in result["results"] if r["verified"] is False]
    failed = [name for name, s in result["contenders"].items() if s.get("failed")]
    return 1 if bad or failed or not result["results"] else 0 if plotted else 2
