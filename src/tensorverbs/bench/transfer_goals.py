"""The goals of ``tensorverbs bench transfer``, judged on one run's results: the small-tensor
goals (the 4 KiB round trip, its tail, its CPU, the in-flight rate, the calls as
applications make them) and the large-tensor ones.

Every goal is stated, each as ``{"goal", "measured", "ratio", "met"}``: ``ratio`` is the
figure the goal bounds (a ratio of medians, or the value over its target) and ``met`` is
True or False, or None with ``measured`` saying what the run lacked to judge it.
"""
from __future__ import annotations

from collections.abc import Callable

from .report import human_size

#: the tensorverbs contender the goals are about, and its path across hosts
SUBJECT, ACROSS = "grpc+verbs", "grpc+verbs tcp"
#: its one-sided reads (Server.read of a RemoteBuffer)
READ = "grpc+verbs read"
SMALL, MEDIUM, LARGE, LARGEST = 4 << 10, 1 << 20, 64 << 20, 256 << 20
IN_FLIGHT, RATE = 2000, 150_000  # recvs in flight, 4 KiB tensors per second
BATCH_RATE, BATCH_GAIN = 500_000, 5  # through a batch recv: tensors per second, x recv_async's
CPU_US = 10.0                      # CPU per 4 KiB recv on each side, µs
BLOCKS_OF_MEMCPY = 0.5             # one-sided blocks over a memcpy of the same blocks
TAIL = 3.0                         # p99 over the median of the 4 KiB round trip


def find(rows: list[dict], name: str, nbytes: int) -> dict | None:
    """The row of ``name`` at ``nbytes`` (None if it did not run)."""
    return next((r for r in rows if r["contender"] == name and r["bytes"] == nbytes), None)


def _goal(goal: str, measured: str, ratio: float | None, met: bool | None) -> dict:
    return {"goal": goal, "measured": measured, "ratio": ratio, "met": met}


def _lacking(goal: str, nbytes: int, *names: str) -> dict:
    return _goal(goal, f"not measured: no {' or '.join(names)} at {human_size(nbytes)}", None, None)


def _compare(results: list[dict], goal: str, name: str, other: str, nbytes: int,
             latency: bool, check: Callable[[float], bool]) -> dict:
    """``name`` against ``other`` at ``nbytes``: the ratio of their median times per
    transfer (``latency``) or of their bandwidths."""
    mine, base = find(results, name, nbytes), find(results, other, nbytes)
    if mine is None or base is None:
        return _lacking(goal, nbytes, *(n for n, r in ((name, mine), (other, base)) if r is None))
    if latency:
        a, b, unit = mine["latency_us"]["median"], base["latency_us"]["median"], "µs"
    else:
        a, b, unit = mine["gbps"], base["gbps"], "GB/s"
    return _goal(goal, f"{a:.3g} vs {b:.3g} {unit} = {a / b:.2f}x", a / b, check(a / b))


def _every_size(results: list[dict], other: str) -> dict:
    """The subject's bandwidth over ``other``'s at its worst size from 4 KiB to 256 MiB:
    missed if it is behind anywhere, met only on a run that spans the whole range."""
    goal = f"every size {human_size(SMALL)}-{human_size(LARGEST)}: {SUBJECT} ahead of {other}"
    pairs = sorted((r["bytes"], r["gbps"], base["gbps"]) for r in results
                   if r["contender"] == SUBJECT and SMALL <= r["bytes"] <= LARGEST
                   and (base := find(results, other, r["bytes"])) is not None)
    if not pairs:
        return _goal(goal, f"not measured: no {other} or no {SUBJECT}", None, None)
    nbytes, a, b = min(pairs, key=lambda p: p[1] / p[2])
    spans = pairs[0][0] == SMALL and pairs[-1][0] == LARGEST
    measured = (f"least {a:.3g} vs {b:.3g} GB/s = {a / b:.2f}x at {human_size(nbytes)}; "
                f"{len(pairs)} sizes, {human_size(pairs[0][0])}-{human_size(pairs[-1][0])}")
    return _goal(goal, measured, a / b, False if a <= b else True if spans else None)


def _rate(flight: list[dict], call: str, least: int, name: str = SUBJECT) -> dict:
    label = "read_blocks" if name == READ and call == "recv_blocks" else call
    goal = f"{human_size(SMALL)}, {IN_FLIGHT:,} in flight by {label}: {name} ≥ {least:,}/s"
    row = find_call(flight, name, call)
    if row is None:
        return _lacking(goal, SMALL, f"{name} in flight by {label}")
    rate = row["tensors_per_s"]
    measured = f"{rate:,.0f} tensors/s = {rate / least:.2f}x"
    if row["in_flight"] != IN_FLIGHT:
        return _goal(goal, f"{measured}, {row['in_flight']:,} in flight", rate / least, None)
    return _goal(goal, measured, rate / least, rate >= least)


def _batch_gain(flight: list[dict]) -> dict:
    """recv_many's rate against recv_async's, in flight alike."""
    goal = f"{human_size(SMALL)} in flight: {SUBJECT} recv_many ≥ {BATCH_GAIN:g}x recv_async"
    many, futures = (find_call(flight, SUBJECT, call) for call in ("recv_many", "recv_async"))
    if many is None or futures is None:
        return _lacking(goal, SMALL, f"{SUBJECT} recv_many and recv_async")
    gain = many["tensors_per_s"] / futures["tensors_per_s"]
    return _goal(goal, f"{many['tensors_per_s']:,.0f} vs {futures['tensors_per_s']:,.0f}/s = {gain:.2f}x",
                 gain, gain >= BATCH_GAIN)


def _blocks_vs_nixl(flight: list[dict], subject: str = SUBJECT) -> dict:
    """``subject``'s blocks call (recv_blocks; read_blocks for the one-sided reads) against
    NIXL's prepared transfer of the same blocks."""
    call = "read_blocks" if subject == READ else "recv_blocks"
    goal = f"blocks in flight: {subject} {call} ahead of nixl's prepared transfer"
    mine, theirs = (find_call(flight, name, "recv_blocks") for name in (subject, "nixl"))
    if mine is None or theirs is None:
        return _goal(goal, f"not measured: no {subject} or no nixl blocks in flight", None, None)
    gain = mine["tensors_per_s"] / theirs["tensors_per_s"]
    return _goal(goal, f"{mine['tensors_per_s']:,.0f} vs {theirs['tensors_per_s']:,.0f}/s = {gain:.2f}x "
                       f"({mine['in_flight']:,} x {human_size(mine['bytes'])})", gain, gain > 1)


def _blocks_vs_memcpy(flight: list[dict]) -> dict:
    """The one-sided blocks' rate against one process copying the same blocks into the
    same pages, at the run's block size."""
    goal = f"blocks in flight: {READ} read_blocks ≥ {BLOCKS_OF_MEMCPY:g}x memcpy of the same blocks"
    mine = next((r for r in flight if r["contender"] == READ and r["call"] == "recv_blocks"), None)
    limit = mine and next((r for r in flight if r["contender"] == "memcpy" and r["call"] == "recv_blocks"
                           and r["bytes"] == mine["bytes"]), None)
    if mine is None or limit is None:
        return _goal(goal, f"not measured: no {READ} or no memcpy blocks in flight", None, None)
    ratio = mine["tensors_per_s"] / limit["tensors_per_s"]
    return _goal(goal, f"{mine['tensors_per_s']:,.0f} vs {limit['tensors_per_s']:,.0f}/s = {ratio:.2f}x "
                       f"({mine['in_flight']:,} x {human_size(mine['bytes'])})", ratio, ratio >= BLOCKS_OF_MEMCPY)


def _on_small(results: list[dict], goal: str,
              judge: Callable[[dict], tuple[str, float, bool]]) -> dict:
    """A goal on the subject's 4 KiB row of the sweep: ``judge(row)`` gives (measured,
    ratio, met)."""
    row = find(results, SUBJECT, SMALL)
    return _lacking(goal, SMALL, SUBJECT) if row is None else _goal(goal, *judge(row))


def _cpu(row: dict) -> tuple[str, float, bool]:
    sender, receiver = row["cpu_us"]["sender"], row["cpu_us"]["receiver"]
    most = max(sender, receiver)
    return (f"sender {sender:.3g}, receiver {receiver:.3g} µs = {most / CPU_US:.2f}x",
            most / CPU_US, most <= CPU_US)


def _tail(row: dict) -> tuple[str, float, bool]:
    p99, median = row["latency_us"]["p99"], row["latency_us"]["median"]
    return f"{p99:.0f} vs {median:.0f} µs = {p99 / median:.2f}x", p99 / median, p99 / median <= TAIL


def find_call(calls: list[dict], name: str, call: str) -> dict | None:
    """The 4 KiB row of ``name`` asked for with ``call`` (None if it did not run)."""
    return next((r for r in calls if r["contender"] == name and r["call"] == call
                 and r["bytes"] == SMALL), None)


def _calls(results: list[dict], calls: list[dict]) -> dict:
    """Each way of calling the subject's recv against the raw unix socket called alike (a
    future against its plain loop): the worst ratio."""
    goal = (f"{human_size(SMALL)} round trip as applications call it (every call): {SUBJECT} "
            "≤ 0.5x raw unix called alike")
    ratios = []
    for mine in (r for r in calls if r["contender"] == SUBJECT and r["bytes"] == SMALL):
        base = (find_call(calls, "raw unix", mine["call"]) or find_call(calls, "raw unix", "recv")
                or find(results, "raw unix", SMALL))
        if base is not None:
            a, b = mine["latency_us"]["median"], base["latency_us"]["median"]
            ratios.append((a / b, mine["call"], a, b))
    if not ratios:
        return _goal(goal, f"not measured: no {SUBJECT} calls or no raw unix at {human_size(SMALL)}",
                     None, None)
    ratio, call, a, b = max(ratios)
    return _goal(goal, f"worst {call}: {a:.3g} vs {b:.3g} µs = {ratio:.2f}x", ratio, ratio <= 0.5)


def goals(results: list[dict], flight: list[dict], calls: list[dict] | None = None) -> list[dict]:
    """Every goal, judged on the sweep's ``results``, the in-flight rows ``flight`` and the
    ``calls`` rows."""
    small, medium, large = human_size(SMALL), human_size(MEDIUM), human_size(LARGE)
    return [
        _compare(results, f"{small} round trip: {SUBJECT} ≤ 0.5x raw unix", SUBJECT, "raw unix",
                 SMALL, True, lambda r: r <= 0.5),
        _compare(results, f"{small} round trip: {SUBJECT} ≤ 0.5x nixl", SUBJECT, "nixl",
                 SMALL, True, lambda r: r <= 0.5),
        _on_small(results, f"{small} round trip: {SUBJECT} p99 ≤ {TAIL:g}x its median", _tail),
        _calls(results, calls or []),
        _compare(results, f"{small} one-sided read: {READ} ≤ 0.5x {SUBJECT}'s recv", READ, SUBJECT,
                 SMALL, True, lambda r: r <= 0.5),
        _compare(results, f"{small} one-sided read: {READ} ahead of nixl's READ", READ, "nixl",
                 SMALL, True, lambda r: r < 1),
        _compare(results, f"{large} one-sided read: {READ} ahead of nixl's READ", READ, "nixl",
                 LARGE, False, lambda r: r > 1),
        _compare(results, f"{small} round trip: {ACROSS} ≤ 1.5x raw tcp", ACROSS, "raw tcp",
                 SMALL, True, lambda r: r <= 1.5),
        _rate(flight, "recv_async", RATE),
        _rate(flight, "recv_many", BATCH_RATE),
        _rate(flight, "recv_blocks", BATCH_RATE),
        _rate(flight, "recv_blocks", BATCH_RATE, READ),
        _batch_gain(flight),
        _blocks_vs_nixl(flight),
        _blocks_vs_nixl(flight, READ),
        _blocks_vs_memcpy(flight),
        _compare(results, f"{medium}: {SUBJECT} ≥ 0.5x memcpy", SUBJECT, "memcpy", MEDIUM,
                 False, lambda r: r >= 0.5),
        _compare(results, f"{large}: {SUBJECT} ≥ 0.9x memcpy", SUBJECT, "memcpy", LARGE,
                 False, lambda r: r >= 0.9),
        _compare(results, f"{large}: {SUBJECT} ≥ 10x grpc", SUBJECT, "grpc", LARGE,
                 False, lambda r: r >= 10),
        *(_every_size(results, other) for other in ("gloo", "tensorpipe", "nixl")),
        _on_small(results, f"CPU per {small} recv: {SUBJECT} ≤ {CPU_US:g} µs on each side", _cpu),
        _compare(results, f"{large} across hosts, soft TCP: {ACROSS} ≥ 0.9x raw tcp", ACROSS,
                 "raw tcp", LARGE, False, lambda r: r >= 0.9),
    ]
