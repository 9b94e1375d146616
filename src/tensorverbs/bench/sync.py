"""``tensorverbs bench sync``: weight sync, one trainer and N receivers.

The trainer holds ``--total`` bytes of parameters (default 1 GiB) in ``--tensors``
float32 tensors shaped as a transformer's (per layer: four attention matrices, two MLP
matrices, their biases and two norms). A round moves every tensor to every receiver:
each receiver first asks for all of them (``recv_async``), then the trainer offers them
and the round is timed in the trainer, from its first send until every handle says its
receivers have the tensor. Two ways of offering, alternating round by round so that a
noisy neighbour slows both alike:

- sends: one ``send`` per tensor and receiver;
- broadcast: one ``send(..., to=[receivers])`` per tensor (its bytes registered once);
- relay: one ``send(..., to=[receivers], relay=True)`` per tensor (each receiver passes
  it on to the next).

For each receiver count and way: the median round, the rate delivered (bytes times
receivers per second), and the broadcast's and the relay's time against the sends'. Every
receiver checks the bytes of its first, middle and last tensor each round.

With ``--hosts`` every task is a host of its own: a network namespace on a switch (a
bridge), its link shaped to ``--link-rate`` both ways (tc token bucket), so that links,
not this machine's memory, are the limit, as in a cluster; needs root. There the relay's
time to N receivers against its time to one is what tells.

A third way, ``reads``: the trainer holds the parameters in memory for one-sided access
(``allocate(..., one_sided=True)``) and registered them once (``register``); each round
every receiver reads every tensor into its own copy of the weights in one call
(``read_many`` of (buffer, out) pairs), all receivers at once, and the round is timed from
the first receiver's start to the last one's end, on the host's monotonic clock.

Where NIXL is installed (``pip install --no-deps nixl-cu12``), a fourth way, ``nixl
reads``: the same reads by NIXL's READ (:mod:`.sync_nixl`: one transfer of every tensor),
timed alike. Where torch is installed, with broadcast or relay chosen, ``gloo
broadcast``: one ``torch.distributed`` broadcast per tensor from the trainer to a gloo
group of all the tasks (:mod:`.sync_gloo`), from the trainer's start until the last
receiver has every tensor.

With ``--late`` (2 or more receivers), a last relay round that serves late receivers
(``relay=True, late=True``) to all receivers but the last; once they all have every
tensor, the last asks for them (a late joiner): its time, against the relay round's, and
the bytes the trainer sent meanwhile (a descriptor per tensor: replicas serve it).
"""
from __future__ import annotations

import argparse
import math
import secrets
import statistics
import sys
from typing import Any, Callable, Sequence

import numpy as np

from .. import netns
from ..local_cluster import cluster_spec, free_port
from ..verbs.config import parse_size
from . import report
from .contenders import nixl
from .peer import Peer, PeerError, close_all
from .sync_gloo import available as gloo_available
from .sync_peers import TIMEOUT

#: tensorverbs' ways, and NIXL's where it is installed
WAYS = ("sends", "broadcast", "relay", "reads")
#: the port of every task with --hosts (each host has its own)
HOST_PORT = 7000
NIXL_WAY = "nixl reads"
GLOO_WAY = "gloo broadcast"
#: tensors per transformer layer: 4 attention (h, h), 2 MLP (4h, h) and (h, 4h), their
#: biases (h, 4h, h: 3) and two norms (h)
PER_LAYER = 11


def layer_shapes(total: int, tensors: int) -> list[tuple[int, ...]]:
    """About ``tensors`` float32 shapes of transformer layers adding up to about
    ``total`` bytes (the hidden size a multiple of 64); fewer than a layer's: ``tensors``
    equal flat ones (a large tensor's relay in parts)."""
    if tensors < PER_LAYER:
        return [(max(1, total // 4 // tensors),)] * tensors
    layers = max(1, round(tensors / PER_LAYER))
    hidden = max(64, round(math.sqrt(total / 4 / layers / 12) / 64) * 64)
    h = hidden
    layer = [(h, h)] * 4 + [(4 * h, h), (h, 4 * h), (h,), (4 * h,), (h,), (h,), (h,)]
    return layer * layers


def ways(chosen: Sequence[str] = WAYS) -> tuple[str, ...]:
    """The ``chosen`` ways this host can run: tensorverbs', NIXL's and gloo's where they are
    installed."""
    gloo = ("broadcast" in chosen or "relay" in chosen) and gloo_available()[0]
    return (tuple(chosen) + ((NIXL_WAY,) if "reads" in chosen and nixl.available()[0] else ())
            + ((GLOO_WAY,) if gloo else ()))


def _gloo(trainer: Peer, receivers: list[Peer]) -> float:
    """A round of gloo broadcasts: from the trainer's start until the last receiver's end."""
    for peer in [trainer, *receivers]:
        peer.post("gloo_round")
    start, _ = trainer.result(timeout=TIMEOUT)
    return max(peer.result(timeout=TIMEOUT)[1] for peer in receivers) - start


def _reads(trainer: Peer, receivers: list[Peer], way: str, step: int) -> float:
    """A round of reads by every receiver at once (NIXL's: the trainer makes progress
    meanwhile): from the first start to the last end."""
    if way == NIXL_WAY:
        trainer.post("nixl_serve")
    for peer in receivers:
        if way == NIXL_WAY:
            peer.post("nixl_read", step)
        else:
            peer.post("read")
    spans = [peer.result(timeout=TIMEOUT) for peer in receivers]
    if way == NIXL_WAY:
        trainer.result(timeout=TIMEOUT)
    return max(end for _, end in spans) - min(start for start, _ in spans)


def run_count(protocol: str, receivers: int, shapes: list[tuple[int, ...]], rounds: int,
              chosen: Sequence[str] = WAYS, link_rate: str | None = None, kill: bool = False,
              late: bool = False) -> dict[str, Any]:
    """Rounds of each way to ``receivers`` receivers; their figures, or ``error``. With
    ``link_rate``, every task is a host of its own with a link of that rate; with ``kill``,
    a last relay round in which a receiver dies (``killed``); with ``late``, one that the
    last receiver joins late (``late``)."""
    if link_rate is None:
        return _run_count(protocol, receivers, shapes, rounds, chosen, None, kill, late)
    with netns.switch(1 + receivers, link_rate) as hosts:
        row = _run_count(protocol, receivers, shapes, rounds, chosen, hosts, kill, late)
    row["link_rate"] = link_rate
    return row


def _run_count(protocol: str, receivers: int, shapes: list[tuple[int, ...]], rounds: int,
               chosen: Sequence[str], hosts: list[netns.Host] | None, kill: bool, late: bool) -> dict[str, Any]:
    if hosts is None:
        cluster = cluster_spec({"trainer": 1, "infer": receivers})
    else:
        addresses = [f"{host.ip}:{HOST_PORT}" for host in hosts]
        cluster = {"trainer": addresses[:1], "infer": addresses[1:]}
    nbytes = sum(int(np.prod(s)) * 4 for s in shapes)
    row: dict[str, Any] = {"protocol": protocol, "receivers": receivers, "tensors": len(shapes), "bytes": nbytes}
    peers: list[Peer] = []
    run_ways = ways(chosen)
    seconds: dict[str, list[float]] = {way: [] for way in run_ways}
    where = [host.name for host in hosts] if hosts is not None else [None] * (1 + receivers)
    # tasks on routable addresses get a job token (they serve anyone without one)
    env = {"TENSORVERBS_TOKEN": secrets.token_hex(16)} if hosts is not None else None
    try:
        trainer = Peer("trainer", "tensorverbs.bench.sync_peers:SyncTrainer", cluster, protocol, shapes, wait=False,
                       netns=where[0], env=env)
        peers = [trainer] + [Peer(f"infer{i}", "tensorverbs.bench.sync_peers:SyncReceiver", cluster, i, protocol,
                                  shapes, wait=False, netns=where[1 + i], env=env) for i in range(receivers)]
        for peer in peers:
            peer.ready()
        if "reads" in run_ways:
            buffers = trainer.call("buffers")
            for peer in peers[1:]:
                peer.call("take", buffers)
        if NIXL_WAY in run_ways:
            offer = trainer.call("nixl_offer")
            for peer in peers[1:]:
                peer.call("nixl_take", offer)
        if GLOO_WAY in run_ways:  # every member joins at once
            address = f"{hosts[0].ip}:{HOST_PORT + 1}" if hosts is not None else f"127.0.0.1:{free_port()}"
            for peer in peers:
                peer.post("gloo_join", f"tcp://{address}")
            for peer in peers:
                peer.result(timeout=TIMEOUT)
        registered = {}
        # a warm-up round of each way first (it sets the channels and queue pairs up)
        for turn in range(len(run_ways) * (1 + rounds)):
            way, step = run_ways[turn % len(run_ways)], turn
            before = trainer.call("registrations")
            if way in ("reads", NIXL_WAY):
                took = _reads(trainer, peers[1:], way, step)
            elif way == GLOO_WAY:
                took = _gloo(trainer, peers[1:])
            else:
                for peer in peers[1:]:
                    peer.call("ask", step, timeout=TIMEOUT)
                took = trainer.call("round", step, way, timeout=TIMEOUT * 2)
                for peer in peers[1:]:
                    peer.call("check", timeout=TIMEOUT)
            registered[way] = trainer.call("registrations") - before
            if turn >= len(run_ways):
                seconds[way].append(took)
        if late and receivers > 1:
            row["late"] = _late_round(trainer, peers[1:], len(run_ways) * (1 + rounds) + 1, nbytes)
        if kill and "relay" in run_ways and receivers > 1:  # last: it ends a receiver
            row["killed"] = _killed_round(trainer, peers[1:], len(run_ways) * (1 + rounds))
    except (PeerError, TimeoutError) as exc:
        row["error"] = str(exc).strip().splitlines()[-1]
        return row
    finally:
        close_all(peers)
    for way in run_ways:
        median = statistics.median(seconds[way])
        row[way] = {"seconds": seconds[way], "median_s": median, "gbps": nbytes * receivers / median / 1e9,
                    "registrations": registered[way]}
    for way in ("broadcast", "relay", "reads"):
        if way in run_ways and "sends" in run_ways:
            row[f"{way}_vs_sends"] = row[way]["median_s"] / row["sends"]["median_s"]
    if NIXL_WAY in run_ways:
        row["reads_vs_nixl"] = row["reads"]["median_s"] / row[NIXL_WAY]["median_s"]
    for way in ("broadcast", "relay"):
        if way in run_ways and GLOO_WAY in run_ways:
            row[f"{way}_vs_gloo"] = row[way]["median_s"] / row[GLOO_WAY]["median_s"]
    if "seconds" in row.get("killed", {}):
        row["killed"]["vs_relay"] = row["killed"]["seconds"] / row["relay"]["median_s"]
    return row


def _killed_round(trainer: Peer, receivers: list[Peer], step: int) -> dict[str, Any]:
    """A relay round in which the first receiver of the chain dies once it has the first
    tensor: the round's time until every handle settled, whether the survivors got every
    tensor whole, and whether the trainer's errors name the dead receiver (and only it)."""
    receivers[0].post("ask_then_die", step)
    try:
        for peer in receivers[1:]:
            peer.call("ask", step, timeout=TIMEOUT)
        seconds, errors = trainer.call("relay_round_failing", step, timeout=TIMEOUT * 2)
        for peer in receivers[1:]:
            peer.call("check", timeout=TIMEOUT)
    except (PeerError, TimeoutError) as exc:  # reported under "killed"; the timed rounds stand
        return {"error": str(exc).strip().splitlines()[-1]}
    dead = "/job:infer/replica:0/task:0"
    survivors = [f"/job:infer/replica:0/task:{i}" for i in range(1, len(receivers))]
    named = bool(errors) and all(dead in e and not any(s in e for s in survivors) for e in errors)
    return {"seconds": seconds, "failed_handles": len(errors), "dead_named": named}


def _late_round(trainer: Peer, receivers: list[Peer], step: int, nbytes: int) -> dict[str, Any]:
    """A relay round that serves late receivers, to all receivers but the last, then the
    last one's recvs of every tensor: its seconds, the round's, and the trainer's bytes
    sent meanwhile."""
    try:
        for peer in receivers[:-1]:
            peer.call("ask", step, timeout=TIMEOUT)
        relay_s = trainer.call("round", step, "late relay", timeout=TIMEOUT * 2)
        for peer in receivers[:-1]:
            peer.call("check", timeout=TIMEOUT)
        before = trainer.call("bytes_sent")
        late_s = receivers[-1].call("late_join", step, timeout=TIMEOUT * 2)
        sent = trainer.call("bytes_sent") - before
        for peer in [trainer, *receivers]:
            peer.call("cleanup", step)
    except (PeerError, TimeoutError) as exc:
        return {"error": str(exc).strip().splitlines()[-1]}
    return {"seconds": late_s, "relay_seconds": relay_s, "vs_relay": late_s / relay_s, "trainer_bytes": sent,
            "trainer_share": sent / nbytes}


def goals(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The weight-sync goals, on the grpc+verbs runs: broadcast to 4 within 0.8x the time
    of 4 sends, one-sided reads ahead of NIXL's; the relay to 4 within 1.3x and to 8 within
    1.5x its time to 1, and ahead of gloo's broadcast to 4 and to 8; with a receiver killed
    mid-relay, the others served within 2x a relay round and the dead one named."""
    verbs = {r["receivers"]: r for r in rows if r["protocol"] == "grpc+verbs" and "error" not in r}
    four = [verbs[4]] if 4 in verbs else []
    broadcast = {"goal": "broadcast to 4 <= 0.8x 4 sends", "measured": "no grpc+verbs run to 4", "met": None}
    reads = {"goal": "reads by 4 ahead of NIXL's READ", "measured": "no grpc+verbs run to 4", "met": None}
    relays = []
    for n, bound in ((4, 1.3), (8, 1.5)):
        relay = {"goal": f"relay to {n} <= {bound}x relay to 1", "measured": f"no grpc+verbs relay to 1 and {n}",
                 "met": None}
        if n in verbs and 1 in verbs and "relay" in verbs[n] and "relay" in verbs[1]:
            ratio = verbs[n]["relay"]["median_s"] / verbs[1]["relay"]["median_s"]
            relay.update(measured=f"{ratio:.2f}x", met=ratio <= bound)
        relays.append(relay)
    if four and "broadcast_vs_sends" in four[0]:
        ratio = four[0]["broadcast_vs_sends"]
        broadcast.update(measured=f"{ratio:.2f}x", met=ratio <= 0.8)
    if four and "reads" in four[0]:
        if "reads_vs_nixl" in four[0]:
            ratio = four[0]["reads_vs_nixl"]
            reads.update(measured=f"{ratio:.2f}x NIXL's time", met=ratio < 1.0)
        else:
            reads["measured"] = f"no NIXL ({nixl.available()[1]})"
    for n in (4, 8):
        gloo = {"goal": f"relay to {n} ahead of gloo's broadcast", "measured": f"no grpc+verbs relay and gloo to {n}",
                "met": None}
        if n in verbs and "relay_vs_gloo" in verbs[n]:
            ratio = verbs[n]["relay_vs_gloo"]
            gloo.update(measured=f"{ratio:.2f}x gloo's time", met=ratio < 1.0)
        relays.append(gloo)
    killed = _extra_round_goal(verbs, "killed", "a receiver killed mid-relay: the others within 2x a round, it named",
                               "--kill", _killed_judged)
    joined = _extra_round_goal(verbs, "late",
                               "a late joiner served by replicas, the trainer's link idle (< 1% of the bytes)",
                               "--late", _late_judged)
    return [broadcast, reads, *relays, killed, joined]


def _extra_round_goal(verbs: dict[int, dict[str, Any]], key: str, goal: str, option: str,
                      judge: Callable[[list[dict[str, Any]]], tuple[str, bool]]) -> dict[str, Any]:
    """The goal of the relay round ``option`` adds (its figures under ``key``): not judged
    without one, failed by the first that failed, else as ``judge`` finds the runs."""
    row: dict[str, Any] = {"goal": goal, "measured": f"no grpc+verbs run with {option} to 2 or more", "met": None}
    runs = [r for r in verbs.values() if key in r]
    failed = [r for r in runs if "error" in r[key]]
    if failed:
        row.update(measured=f"to {failed[0]['receivers']}: {failed[0][key]['error']}", met=False)
    elif runs:
        measured, met = judge(runs)
        row.update(measured=measured, met=met)
    return row


def _killed_judged(runs: list[dict[str, Any]]) -> tuple[str, bool]:
    worst = max(runs, key=lambda r: r["killed"]["vs_relay"])
    ratio, named = worst["killed"]["vs_relay"], all(r["killed"]["dead_named"] for r in runs)
    return f"{ratio:.2f}x at {worst['receivers']}, {'named' if named else 'NOT named'}", ratio <= 2.0 and named


def _late_judged(runs: list[dict[str, Any]]) -> tuple[str, bool]:
    late = max(runs, key=lambda r: r["late"]["trainer_share"])["late"]
    return (f"the trainer sent {late['trainer_bytes']:,} bytes ({late['trainer_share']:.4%}); the late joiner took "
            f"{late['vs_relay']:.2f}x a relay round", late["trainer_share"] < 0.01)


def show(rows: Sequence[dict[str, Any]]) -> None:
    """Print every count's figures and the goal."""
    shown = [w for w in ways() if any(w in r for r in rows)] or list(WAYS)
    ratios = [ratio for ratio in ("broadcast_vs_sends", "relay_vs_sends", "reads_vs_sends", "reads_vs_nixl",
                                  "relay_vs_gloo")
              if any(ratio in r for r in rows)]
    body = []
    for r in rows:
        if "error" in r:
            body.append([r["protocol"], r["receivers"], *["-"] * (len(shown) + len(ratios)), r["error"]])
            continue
        body.append([r["protocol"], r["receivers"],
                     *(f"{r[w]['median_s'] * 1e3:.0f} ms, {r[w]['gbps']:.2f} GB/s, {r[w]['registrations']} reg."
                       for w in shown),
                     *(f"{r[ratio]:.2f}x" if ratio in r else "-" for ratio in ratios), ""])
    total = report.human_size(rows[0]["bytes"]) if rows else "-"
    hosts = f", each task a host with a {rows[0]['link_rate']} link" if rows and "link_rate" in rows[0] else ""
    report.console.print(report.table(
        f"weight sync: {total} in {rows[0]['tensors'] if rows else 0} tensors to every receiver{hosts}",
        ["protocol", "receivers", *shown, *(ratio.replace("_vs_", " / ") for ratio in ratios), "error"],
        body,
        caption="median round (until every receiver has every tensor), bytes x receivers per second, "
                "source registrations per round"))
    report.console.print(report.table("goals", ["goal", "measured", ""], report.goal_rows(goals(rows))))


def parser() -> argparse.ArgumentParser:
    """The benchmark's command-line options."""
    p = argparse.ArgumentParser(prog="tensorverbs bench sync", description=__doc__.split("\n\n")[0])
    p.add_argument("--receivers", type=int, nargs="+", default=[1, 2, 4], help="receiver counts (default 1 2 4)")
    p.add_argument("--protocols", nargs="+", choices=("grpc", "grpc+verbs"), default=["grpc+verbs"])
    p.add_argument("--total", default="1GiB", help="bytes of parameters (default 1GiB)")
    p.add_argument("--tensors", type=int, default=300, help="about this many tensors (default 300; under 11: that many equal tensors)")
    p.add_argument("--rounds", type=int, default=3, help="timed rounds of each way (default 3)")
    p.add_argument("--ways", nargs="+", choices=WAYS, default=list(WAYS),
                   help="the ways to run (default: all; reads adds NIXL's where it is installed)")
    p.add_argument("--hosts", action="store_true",
                   help="every task a host of its own (a network namespace on a switch; needs root)")
    p.add_argument("--kill", action="store_true",
                   help="after the timed rounds, a relay round in which the first receiver dies mid-sync")
    p.add_argument("--late", action="store_true",
                   help="after the timed rounds, a relay round that the last receiver joins late")
    p.add_argument("--link-rate", default="1gbit", help="with --hosts, each host's link, in tc's units (default 1gbit)")
    p.add_argument("--json", default="sync.json", help="where the results go (default sync.json)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; the exit status (1 if a count failed)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    p = parser()
    args = p.parse_args(argv)
    if min(args.receivers) < 1 or args.rounds < 1 or args.tensors < 1:
        p.error("give --receivers >= 1, --rounds >= 1 and --tensors >= 1")
    if args.hosts and (why := netns.unavailable_reason()) is not None:
        p.error(f"--hosts: {why}")
    try:
        netns.rate_bits(args.link_rate)
    except ValueError as exc:
        p.error(f"--link-rate: {exc}")
    link_rate = args.link_rate if args.hosts else None
    try:
        shapes = layer_shapes(parse_size(args.total), args.tensors)
    except ValueError as exc:
        p.error(str(exc))
    rows = report.run_counts(args.protocols, args.receivers, "receiver(s)",
                             lambda protocol, receivers: run_count(protocol, receivers, shapes, args.rounds,
                                                                   args.ways, link_rate, args.kill, args.late))
    show(rows)
    return report.conclude(args.json, {"results": rows, "goals": goals(rows)}, ["sync", *argv])
