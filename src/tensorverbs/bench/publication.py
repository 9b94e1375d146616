"""``tensorverbs bench publication``: reads of a publication racing an owner that keeps
updating it, against plain reads of the same bytes.

The owner (a process of its own) publishes ``--total`` bytes in ``--tensors`` float32
tensors (:meth:`tensorverbs.Server.publish`), every element of a version holding that
version's number, and from then on publishes the next version, one after the other,
until the run ends (each update waits ``--grace``). It also holds the same tensors in
memory for one-sided access, registered once. Each reader (``--readers``, each in its
own process) alternates rounds: ``read_publication`` of the publication, checking
every element of every tensor against the version it says (a mix of two versions is a
torn read), and ``read_many`` of the registered tensors into its own (what a reader does
without a publication). Only the calls are timed. Reported: reads per second each way,
their ratio, the torn reads, the reads read again, and the updates made meanwhile.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from typing import Any

import numpy as np

from ..local_cluster import cluster_spec
from ..server import Server
from ..verbs.config import parse_size
from . import report
from .peer import Peer, PeerError, close_all

OWNER = "/job:owner/replica:0/task:0"
TIMEOUT = 120.0
#: every element of a version holds this of the version's number (float32 holds it exactly)
TAG_MODULUS = 1 << 24


def _tag(version: int) -> float:
    return float(version % TAG_MODULUS)


class PublicationOwner:
    """The owner, in its own process: the publication, its updater, and a plain copy."""

    def __init__(self, cluster: dict[str, list[str]], protocol: str, shapes: list[tuple[int, ...]],
                 grace: float | None) -> None:
        self.server = Server(cluster, "owner", 0, protocol, startup_grace=TIMEOUT)
        self.tensors = {f"p{i}": np.full(shape, _tag(1), np.float32) for i, shape in enumerate(shapes)}
        self.publication = self.server.publish(self.tensors, grace=grace)
        self.plain = [self.server.allocate(shape, np.float32, one_sided=True) for shape in shapes]
        for array in self.plain:
            array[...] = 1.0
        self.buffers = [self.server.register(array, writable=False) for array in self.plain]
        self._stop = threading.Event()
        self._updates = 0
        self._failed: BaseException | None = None
        self._thread: threading.Thread | None = None

    def refs(self) -> tuple[Any, list[Any]]:
        """The publication's ref, and the plain copy's RemoteBuffers."""
        return self.publication.ref, self.buffers

    def start(self) -> None:
        """Publish each next version, one after the other, until :meth:`stop`."""
        def run() -> None:
            try:
                while not self._stop.is_set():
                    tag = _tag(self.publication.version + 1)
                    for tensor in self.tensors.values():
                        tensor.fill(tag)
                    self.publication.update(self.tensors)
                    self._updates += 1
            except BaseException as exc:  # raised by stop(): reads of a publication that stopped changing prove nothing
                self._failed = exc

        self._thread = threading.Thread(target=run, name="updater")
        self._thread.start()

    def stop(self) -> int:
        """Stop updating: how many updates were made."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._failed is not None:
            raise RuntimeError(f"the updates failed: {self._failed!r}") from self._failed
        return self._updates

    def close(self) -> None:
        try:
            self.stop()
        finally:
            self.server.stop()


class PublicationReader:
    """A reader, in its own process."""

    def __init__(self, cluster: dict[str, list[str]], index: int, protocol: str,
                 shapes: list[tuple[int, ...]]) -> None:
        self.server = Server(cluster, "reader", index, protocol, startup_grace=TIMEOUT)
        self.weights = [np.zeros(shape, np.float32) for shape in shapes]
        self.ref: Any = None
        self.buffers: list[Any] = []

    def take(self, ref: Any, buffers: list[Any]) -> None:
        self.ref, self.buffers = ref, buffers

    def publication_reads(self, count: int) -> dict[str, Any]:
        """``count`` reads of the publication (each checked whole): seconds in the calls,
        torn reads, reads read again, versions seen."""
        out = {f"p{i}": weight for i, weight in enumerate(self.weights)}
        seconds, torn, versions = 0.0, 0, set()
        rereads = self.server.stats()["publication_rereads"]
        for _ in range(count):
            start = time.perf_counter()
            version, tensors = self.server.read_publication(self.ref, out=out, timeout=TIMEOUT)
            seconds += time.perf_counter() - start
            tag = _tag(version)
            torn += any(not (tensor == tag).all() for tensor in tensors.values())
            versions.add(version)
        return {"seconds": seconds, "torn": torn, "versions": len(versions),
                "rereads": self.server.stats()["publication_rereads"] - rereads}

    def plain_reads(self, count: int) -> float:
        """``count`` plain ``read_many`` of the same bytes: seconds in the calls."""
        entries = list(zip(self.buffers, self.weights))
        start = time.perf_counter()
        for _ in range(count):
            self.server.read_many(entries, timeout=TIMEOUT)
        return time.perf_counter() - start

    def close(self) -> None:
        self.server.stop()


def run(protocol: str, readers: int, shapes: list[tuple[int, ...]], reads: int, rounds: int,
        grace: float | None) -> dict[str, Any]:
    """The run's figures (or its ``error``)."""
    cluster = cluster_spec({"owner": 1, "reader": readers})
    nbytes = sum(int(np.prod(s)) * 4 for s in shapes)
    row: dict[str, Any] = {"protocol": protocol, "readers": readers, "tensors": len(shapes), "bytes": nbytes,
                           "grace_s": grace}
    peers: list[Peer] = []
    per_round = -(-reads // rounds)  # (at least ``reads`` in all)
    published: list[dict[str, Any]] = []
    plain: list[float] = []
    try:
        owner = Peer("owner", "tensorverbs.bench.publication:PublicationOwner", cluster, protocol, shapes, grace,
                     wait=False)
        peers = [owner] + [Peer(f"reader{i}", "tensorverbs.bench.publication:PublicationReader", cluster, i,
                                protocol, shapes, wait=False) for i in range(readers)]
        for peer in peers:
            peer.ready()
        ref, buffers = owner.call("refs")
        for peer in peers[1:]:
            peer.call("take", ref, buffers)
            peer.call("publication_reads", 2, timeout=TIMEOUT)  # warm-up: the queue pairs set up
            peer.call("plain_reads", 2, timeout=TIMEOUT)
        owner.call("start")
        for _ in range(rounds):
            for peer in peers[1:]:
                peer.post("publication_reads", per_round)
            published += [peer.result(timeout=TIMEOUT * 10) for peer in peers[1:]]
            for peer in peers[1:]:
                peer.post("plain_reads", per_round)
            plain += [peer.result(timeout=TIMEOUT * 10) for peer in peers[1:]]
        row["updates"] = owner.call("stop")
    except (PeerError, TimeoutError) as exc:
        row["error"] = str(exc).strip().splitlines()[-1]
        return row
    finally:
        close_all(peers)
    row["reads"] = per_round * rounds * readers
    row["torn"] = sum(p["torn"] for p in published)
    row["rereads"] = sum(p["rereads"] for p in published)
    row["publication_reads_per_s"] = statistics.median(per_round / p["seconds"] for p in published)
    row["plain_reads_per_s"] = statistics.median(per_round / s for s in plain)
    row["plain_vs_publication"] = row["plain_reads_per_s"] / row["publication_reads_per_s"]
    return row


def goals(row: dict[str, Any]) -> list[dict[str, Any]]:
    """No torn read in 10,000 or more; publication reads within 1.2x plain reads' time."""
    torn = {"goal": "0 torn reads in >= 10,000", "measured": "-", "met": None}
    rate = {"goal": "publication reads within 1.2x plain read_many", "measured": "-", "met": None}
    if "error" not in row:
        torn.update(measured=f"{row['torn']} in {row['reads']}", met=row["torn"] == 0 and row["reads"] >= 10_000)
        ratio = row["plain_vs_publication"]
        rate.update(measured=f"{ratio:.2f}x", met=ratio <= 1.2)
    return [torn, rate]


def show(row: dict[str, Any]) -> None:
    """Print the run's figures and the goals."""
    grace = "the default" if row["grace_s"] is None else f"{row['grace_s'] * 1e3:g} ms"
    title = (f"publication: {report.human_size(row['bytes'])} in {row['tensors']} tensors, "
             f"{row['readers']} reader(s), {row['protocol']}, grace {grace}")
    if "error" in row:
        body = [["error", row["error"]]]
    else:
        body = [["publication reads/s (median round)", f"{row['publication_reads_per_s']:.0f}"],
                ["plain read_many/s (median round)", f"{row['plain_reads_per_s']:.0f}"],
                ["plain / publication", f"{row['plain_vs_publication']:.2f}x"],
                ["reads, torn", f"{row['reads']}, {row['torn']}"],
                ["reads read again", str(row["rereads"])],
                ["updates meanwhile", str(row["updates"])]]
    report.console.print(report.table(title, ["", ""], body))
    report.console.print(report.table("goals", ["goal", "measured", ""], report.goal_rows(goals(row))))


def parser() -> argparse.ArgumentParser:
    """The benchmark's command-line options."""
    p = argparse.ArgumentParser(prog="tensorverbs bench publication", description=__doc__.split("\n\n")[0])
    p.add_argument("--protocol", choices=("grpc", "grpc+verbs"), default="grpc+verbs")
    p.add_argument("--total", default="4MiB", help="bytes published (default 4MiB)")
    p.add_argument("--tensors", type=int, default=32, help="tensors published (default 32)")
    p.add_argument("--readers", type=int, default=1, help="reading processes (default 1)")
    p.add_argument("--reads", type=int, default=10_000, help="reads of each way per reader (default 10000)")
    p.add_argument("--rounds", type=int, default=10, help="rounds each way, alternating (default 10)")
    p.add_argument("--grace", type=float, default=None,
                   help="the publication's grace in seconds (default: publish's, the time to read it at 1 GB/s)")
    p.add_argument("--json", default="publication.json", help="where the results go (default publication.json)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; the exit status (1 if the run failed)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    p = parser()
    args = p.parse_args(argv)
    if min(args.readers, args.reads, args.rounds, args.tensors) < 1 or (args.grace or 0) < 0:
        p.error("give --readers, --reads, --rounds, --tensors >= 1 and --grace >= 0")
    try:
        total = parse_size(args.total)
    except ValueError as exc:
        p.error(str(exc))
    per = max(1, total // 4 // args.tensors)
    shapes = [(per,)] * args.tensors
    report.console.print(f"{args.protocol}: {args.readers} reader(s) ...")
    row = run(args.protocol, args.readers, shapes, args.reads, args.rounds, args.grace)
    show(row)
    return report.conclude(args.json, {"results": [row], "goals": goals(row)}, ["publication", *argv])
