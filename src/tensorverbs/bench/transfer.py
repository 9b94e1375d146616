"""``tensorverbs bench transfer``: receiver-initiated transfers of float32 tensors between
two processes, for every transport available here, beside the limits measured in the
same run (a memcpy in one process, raw sockets).

Every contender runs in its own pair of processes, all started before the timing. For
each size, every contender first transfers a warm-up round (its first tensor's bytes are
checked), then the timed rounds alternate between the contenders, so that a noisy
neighbour slows them all alike. A transfer is timed in the receiving process from the
request to the tensor in hand: at small sizes that is a round trip. Each side measures
its own process's CPU time over the timed transfers: the CPU a transfer costs the sender
and the receiver.

Then the in-flight rate: the contenders that can (tensorverbs' ``recv_async``) start
``--in-flight`` receives of 4 KiB (``--flight-size``) at once and wait for them all,
while the sender sends as many; tensors per second, Python calls included; and the same in one batch call
(tensorverbs' ``recv_many``). Then 4 KiB as applications call it:
the blocking ``recv(..., timeout=)`` in a loop, ``recv_async(...).result()``, and a
blocking recv after the process sat idle for 20 ms (its caches and its threads cold).
Last, the goals, each with the figure it bounds. ``--busy N`` runs it all beside N
processes that keep the processors busy (a machine shared with other work).

    tensorverbs bench transfer --max-size 256MiB --rounds 8 --plot transfer.png
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

from rich.markup import escape

from ..verbs.config import parse_size
from . import busy, cpu_profile, report
from .contenders import Contender, Pair, by_name
from .contenders.base import CALLS, FLIGHT_CALLS, IDLE_GAP
from .peer import PeerError
from .transfer_goals import SMALL, goals
from .transfer_report import plot, show

#: the size of the in-flight rate (unless given) and of the calls
FLIGHT_BYTES = SMALL_BYTES = SMALL
#: transfers a round for each way of calling (one "recv after idle" sits idle 20 ms first)
CALL_TRANSFERS = 25


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


class Turns:
    """The pairs still running. Every round gets step ids of its own; a pair that fails
    is closed and dropped, its failure kept in ``status``."""

    def __init__(self, pairs: list[Pair], status: dict) -> None:
        self.live, self.status, self.step = list(pairs), status, 0

    def run(self, pair: Pair, nbytes: int, count: int, verify: bool, flight: bool,
            call: str = "recv") -> dict | None:
        """One round of ``pair`` (see :meth:`Pair.run`); None if it failed."""
        pair.resume()
        try:
            out = pair.run(nbytes, count, self.step, verify, flight, call)
            pair.pause()
            return out
        except PeerError as exc:
            self.status[pair.contender.name].update(failed=str(exc))
            self.live.remove(pair)
            pair.close()
            return None
        finally:
            self.step += count


@dataclass
class Tally:
    """One contender's timed transfers at one size."""

    verified: bool | None = None
    seconds: list[float] = field(default_factory=list)
    transfers: int = 0
    cpu: float = 0.0
    sender_cpu: float | None = None

    def add(self, out: dict, count: int) -> None:
        self.seconds.extend(out["seconds"])
        self.transfers += count
        self.cpu += out["cpu"]
        if out["sender_cpu"] is not None:
            self.sender_cpu = (self.sender_cpu or 0.0) + out["sender_cpu"]

    def cpu_us(self) -> dict[str, float | None]:
        """µs of CPU per transfer on each side (no sender for a limit in one process)."""
        per = 1e6 / self.transfers
        return {"sender": None if self.sender_cpu is None else self.sender_cpu * per,
                "receiver": self.cpu * per}


def rounds_of(turns: Turns, nbytes: int, count: int, rounds: int, warmup: int, flight: bool,
              advance: Callable[[], None], call: str = "recv") -> dict[str, Tally]:
    """``warmup`` checked rounds of each live pair (those that can, in ``flight`` or with
    ``call``), then ``rounds`` timed rounds taking turns, each round starting one pair
    further on."""
    pairs = [p for p in turns.live if (p.contender.flies(call) if flight else p.can(call))]
    tallies: dict[str, Tally] = {p.contender.name: Tally() for p in pairs}
    for pair in pairs:
        for _ in range(warmup):
            if (out := turns.run(pair, nbytes, count, True, flight, call)) is not None:
                tallies[pair.contender.name].verified = out["ok"]
    advance()
    for r in range(rounds):
        k = r % max(len(pairs), 1)
        for pair in pairs[k:] + pairs[:k]:
            if pair not in turns.live:
                continue
            if (out := turns.run(pair, nbytes, count, False, flight, call)) is not None:
                tallies[pair.contender.name].add(out, count)
        advance()
    return {name: t for name, t in tallies.items() if t.transfers}


def measure(turns: Turns, sizes: list[int], rounds: int, warmup: int, budget: int, most: int,
            advance: Callable[[], None] = lambda: None) -> list[dict]:
    """Run the sweep; one result per (contender, size) that ran."""
    results = []
    for nbytes in sizes:
        tallies = rounds_of(turns, nbytes, transfers_per_round(nbytes, budget, most), rounds,
                            warmup, False, advance)
        for name, t in tallies.items():
            s = report.summarize(t.seconds)
            results.append({
                "contender": name, "bytes": nbytes, "verified": t.verified,
                "seconds": s, "gbps": nbytes / s["median"] / 1e9,
                "gbps_p25": nbytes / s["p75"] / 1e9, "gbps_p75": nbytes / s["p25"] / 1e9,
                "latency_us": {"median": s["median"] * 1e6, "p99": s["p99"] * 1e6},
                "cpu_us": t.cpu_us()})
    return results


def measure_flight(turns: Turns, count: int, rounds: int, warmup: int,
                   advance: Callable[[], None] = lambda: None, nbytes: int = FLIGHT_BYTES) -> list[dict]:
    """The in-flight rate of every live pair that can: ``count`` transfers of ``nbytes``
    started at once per round, each way of :data:`FLIGHT_CALLS`; one result per
    (contender, call)."""
    results = []
    for call in FLIGHT_CALLS:
        for name, t in rounds_of(turns, nbytes, count, rounds, warmup, True, advance, call).items():
            s = report.summarize(t.seconds)
            results.append({"contender": name, "call": call, "bytes": nbytes, "in_flight": count,
                            "verified": t.verified, "seconds": s,
                            "tensors_per_s": count / s["median"], "cpu_us": t.cpu_us()})
    return results


def measure_calls(turns: Turns, count: int, rounds: int, warmup: int,
                  advance: Callable[[], None] = lambda: None) -> list[dict]:
    """4 KiB transfers asked for as applications ask (each of :data:`CALLS`, ``count`` a
    round), by every live pair that can; one result per (contender, call)."""
    results = []
    for call in CALLS:
        for name, t in rounds_of(turns, SMALL_BYTES, count, rounds, warmup, False, advance,
                                 call).items():
            s = report.summarize(t.seconds)
            results.append({"contender": name, "call": call, "bytes": SMALL_BYTES,
                            "verified": t.verified, "seconds": s,
                            "latency_us": {"median": s["median"] * 1e6, "p99": s["p99"] * 1e6},
                            "cpu_us": t.cpu_us()})
    return results


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
    p.add_argument("--in-flight", type=int, default=2000, metavar="N",
                   help="recvs in flight for the in-flight rate (default 2000; 0 skips)")
    p.add_argument("--flight-size", default="4KiB", metavar="SIZE",
                   help="the size of the tensors in flight (default 4KiB; the goals are of 4 KiB)")
    p.add_argument("--call-transfers", type=int, default=CALL_TRANSFERS, metavar="N",
                   help="4 KiB transfers a round for each way of calling recv (default "
                   f"{CALL_TRANSFERS}; 0 skips)")
    p.add_argument("--contenders", help="comma-separated names (default: all available): "
                   + ", ".join(c.name for c in by_name()))
    p.add_argument("--busy", type=int, default=0, metavar="N",
                   help="N processes that keep the processors busy beside the contenders for "
                   "the whole run, as other work on a shared machine (default 0)")
    p.add_argument("--profile", nargs="?", type=float, const=10.0, metavar="SECONDS",
                   help="instead of the sweep: sample the 4 KiB loop of each contender (default "
                   "grpc+verbs) with perf for SECONDS (default 10) and print where the CPU goes")
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
        round_bytes: int = 64 << 20, max_transfers: int = 100,
        in_flight: int = 2000, call_transfers: int = CALL_TRANSFERS,
        flight_bytes: int = FLIGHT_BYTES) -> dict[str, Any]:
    """Start the contenders, run the sweep, the in-flight rate (of tensors of
    ``flight_bytes``) and the calls (``in_flight`` or ``call_transfers`` 0 skips them) with
    a progress bar, stop them; the result."""
    with report.progress() as bar:
        pairs, status = start(contenders, bar.console.print)
        flights = in_flight > 0 and any(p.contender.flies(call) for p in pairs for call in FLIGHT_CALLS)
        phases = len(sizes) + flights * len(FLIGHT_CALLS) + (len(CALLS) if call_transfers > 0 else 0)
        task = bar.add_task("transfers", total=phases * (rounds + 1))
        turns = Turns(pairs, status)
        try:
            results = measure(turns, sizes, rounds, warmup, round_bytes, max_transfers,
                              lambda: bar.advance(task))
            flight = measure_flight(turns, in_flight, rounds, warmup,
                                    lambda: bar.advance(task), flight_bytes) if flights else []
            calls = measure_calls(turns, call_transfers, rounds, warmup,
                                  lambda: bar.advance(task)) if call_transfers > 0 else []
        finally:
            for pair in pairs:
                pair.close()
    settings = {"sizes": sizes, "rounds": rounds, "warmup_rounds": warmup,
                "round_bytes": round_bytes, "max_transfers": max_transfers,
                "in_flight": in_flight, "flight_bytes": flight_bytes, "call_transfers": call_transfers,
                "idle_gap_s": IDLE_GAP, "dtype": "float32"}
    return {"benchmark": "transfer", "settings": settings, "contenders": status,
            "results": results, "in_flight": flight, "calls": calls,
            "goals": goals(results, flight, calls)}


def run_profile(contenders: list[Contender], seconds: float) -> int:
    """``--profile``: each contender's 4 KiB tight loop under perf; prints the reports."""
    if (why := cpu_profile.unavailable()) is not None:
        report.console.print(f"[red]cannot profile[/]: {why}")
        return 2
    with report.progress() as bar:
        pairs, status = start(contenders, bar.console.print)
    turns, failed = Turns(pairs, status), False
    try:
        for pair in pairs:
            count = CALL_TRANSFERS * 4
            turns.run(pair, SMALL_BYTES, count, True, False)  # warm, checked
            reports = cpu_profile.profile(
                pair, seconds, lambda: turns.run(pair, SMALL_BYTES, count, False, False))
            name = pair.contender.name
            if status[name].get("failed"):
                failed = True
                report.console.print(f"[red]{name} failed[/]: {escape(status[name]['failed'])}")
                continue
            report.console.rule(f"{name}: {report.human_size(SMALL_BYTES)} recv in a loop, "
                                f"{seconds:g} s sampled")
            for side, text in reports.items():
                report.console.print(f"{side}: CPU samples by thread and library (%)", markup=False)
                report.console.print(text["by_thread"], markup=False, highlight=False,
                                     soft_wrap=True)
                report.console.print(f"{side}: hottest symbols (%)", markup=False)
                report.console.print(text["by_symbol"], markup=False, highlight=False,
                                     soft_wrap=True)
    finally:
        for pair in turns.live:
            pair.close()
    return 1 if failed or not pairs else 0


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    p = parser()
    args = p.parse_args(argv)
    sizes = _sizes(p, args)
    if (args.rounds < 1 or args.warmup < 0 or args.max_transfers < 1 or args.in_flight < 0
            or args.call_transfers < 0 or args.busy < 0):
        p.error("give --rounds >= 1, --warmup >= 0, --max-transfers >= 1, --in-flight >= 0, "
                "--call-transfers >= 0 and --busy >= 0")
    try:
        contenders = by_name(args.contenders.split(",") if args.contenders else None)
        round_bytes = parse_size(args.round_bytes)
        flight_bytes = parse_size(args.flight_size)
    except ValueError as exc:
        p.error(str(exc))
    if args.profile is not None:
        return run_profile(contenders if args.contenders else by_name(["grpc+verbs"]),
                           args.profile)
    with busy.neighbours(args.busy):
        result = run(contenders, sizes, args.rounds, args.warmup, round_bytes,
                     args.max_transfers, args.in_flight, args.call_transfers, flight_bytes)
    result["settings"]["busy_neighbours"] = args.busy
    show(result)
    plotted = report.save(result, ["transfer", *argv], args.json, args.plot, plot)
    bad = [r for r in result["results"] + result["in_flight"] + result["calls"]
           if r["verified"] is False]
    failed = [name for name, s in result["contenders"].items() if s.get("failed")]
    return 1 if bad or failed or not result["results"] else 0 if plotted else 2
