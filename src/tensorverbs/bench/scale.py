"""``tensorverbs bench scale``: N tasks started at once, all-to-all.

Each task is a process of this machine with its own Server. Every step, every task sends
a tensor (64 KiB by default) to every other and receives one from every other, all in
flight at once, and checks the bytes. Per protocol and task count the benchmark prints:

- set-up: the slowest task's first step, from the moment every task was told to start
  (every channel is set up on first use, so this is the set-up storm);
- step: the median of the slowest task's later steps;
- peak RSS (VmHWM), proportional set size (PSS: shared pages split among their users)
  and registered memory (grpc+verbs: the pool, and a channel's message buffers) of the
  largest task;
- idle CPU: then every task sits idle for ``--idle`` seconds (10) with its N-1 channels
  open; the busiest task's CPU, in percent of a core.

A count that fails (a task's error, a timeout) is reported with the first error and the
benchmark goes on with the next.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any, Sequence

from ..local_cluster import cluster_spec, pattern, same
from ..server import Server
from ..verbs.config import parse_size
from . import report
from .peer import Peer, PeerError, close_all

PROTOCOLS = ("grpc", "grpc+verbs")
JOB = "worker"
#: seconds a task may take beyond its recvs' timeouts to report
WAIT_MORE = 60.0
#: seconds every task sits idle after its steps (its CPU then is the idle cost)
IDLE_SECONDS = 10.0


def _status_kib(field: str) -> int:
    with open("/proc/self/status", encoding="utf-8") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _pss_kib() -> int:
    try:
        with open("/proc/self/smaps_rollup", encoding="utf-8") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class ScaleTask:
    """One task of the all-to-all, in its own process."""

    def __init__(self, cluster: dict[str, list[str]], index: int, protocol: str, nbytes: int,
                 timeout: float) -> None:
        # N tasks starting at once on one machine may take long to answer their first
        # calls: a peer may take as long as a recv's timeout to come up. The grace is
        # longer still, so that a recv which waited on a peer ends at its own deadline
        # (DeadlineExceededError), never at a grace that began a moment before it
        self.server = Server(cluster, JOB, index, protocol, startup_grace=timeout + WAIT_MORE)
        self.index, self.nbytes, self.timeout = index, nbytes, timeout
        self.peers = [f"/job:{JOB}/task:{i}" for i in range(len(cluster[JOB])) if i != index]

    def _step(self, step: int) -> None:
        mine = pattern(self.nbytes, self.index * 100_003 + step)
        for peer in self.peers:
            self.server.send("t", mine, to=peer, step_id=step)
        futures = {peer: self.server.recv_async("t", peer, step, self.timeout) for peer in self.peers}
        for peer, future in futures.items():
            sender = int(peer.rsplit(":", 1)[1])
            if not same(future.result(), pattern(self.nbytes, sender * 100_003 + step)):
                raise AssertionError(f"{self.server.task}: wrong bytes from {peer} at step {step}")

    def run(self, steps: int) -> dict[str, Any]:
        """``steps`` steps: seconds of each, then this process's memory."""
        seconds = []
        for step in range(steps):
            start = time.perf_counter()
            self._step(step)
            seconds.append(time.perf_counter() - start)
        self.server.flush(self.timeout)  # every peer has what this task sent
        stats = self.server.stats()
        return {"seconds": seconds, "rss_peak_bytes": _status_kib("VmHWM") << 10, "pss_bytes": _pss_kib() << 10,
                "registered_bytes": stats.get("registered_bytes", 0),
                "channel_bytes": stats.get("message_buffer_bytes", 0) // len(self.peers)}

    def idle(self, seconds: float) -> float:
        """Percent of a core this process used while it sat ``seconds`` idle, channels open."""
        cpu = time.process_time()
        time.sleep(seconds)
        return (time.process_time() - cpu) / seconds * 100

    def close(self) -> None:
        self.server.stop()


def run_count(protocol: str, tasks: int, steps: int, nbytes: int, timeout: float,
              idle: float = IDLE_SECONDS) -> dict[str, Any]:
    """One all-to-all of ``tasks`` tasks, then ``idle`` seconds of rest; its figures, or
    ``error``."""
    cluster = cluster_spec({JOB: tasks})
    peers: list[Peer] = []
    row: dict[str, Any] = {"protocol": protocol, "tasks": tasks, "steps": steps, "bytes": nbytes}
    try:
        peers = [Peer(f"{JOB}{i}", "tensorverbs.bench.scale:ScaleTask", cluster, i, protocol, nbytes, timeout,
                      wait=False) for i in range(tasks)]
        for peer in peers:
            peer.ready()
        for peer in peers:  # at once: no task waits for another to be told
            peer.post("run", steps)
        results = [peer.result(timeout * steps + WAIT_MORE) for peer in peers]
        for peer in peers:  # idle at once, every channel open
            peer.post("idle", idle)
        idle_pct = max(peer.result(idle + WAIT_MORE) for peer in peers)
    except (PeerError, TimeoutError) as exc:
        row["error"] = str(exc).strip().splitlines()[-1]
        return row
    finally:
        close_all(peers)
    slowest = [max(r["seconds"][s] for r in results) for s in range(steps)]
    row.update(setup_s=slowest[0], step_s=statistics.median(slowest[1:]) if steps > 1 else None,
               rss_peak_bytes=max(r["rss_peak_bytes"] for r in results),
               pss_bytes=max(r["pss_bytes"] for r in results),
               registered_bytes=max(r["registered_bytes"] for r in results),
               channel_bytes=max(r["channel_bytes"] for r in results), idle_cpu_pct=idle_pct)
    return row


def _mib(nbytes: int | None) -> str:
    return "-" if nbytes is None else f"{nbytes / (1 << 20):.0f} MiB"


def _kib(nbytes: int | None) -> str:
    return "-" if not nbytes else f"{nbytes / (1 << 10):.0f} KiB"


def show(rows: Sequence[dict[str, Any]]) -> None:
    """Print the figures of every count as one table."""
    def ms(seconds: float | None) -> str:
        return "-" if seconds is None else f"{seconds * 1e3:.1f} ms"

    report.console.print(report.table(
        "all-to-all: every task sends to and receives from every other each step",
        ["protocol", "tasks", "set-up", "step", "peak RSS", "PSS", "registered", "per channel",
         "idle CPU", "error"],
        [[r["protocol"], r["tasks"], ms(r.get("setup_s")), ms(r.get("step_s")), _mib(r.get("rss_peak_bytes")),
          _mib(r.get("pss_bytes")), _mib(r.get("registered_bytes")), _kib(r.get("channel_bytes")),
          "-" if r.get("idle_cpu_pct") is None else f"{r['idle_cpu_pct']:.1f}%", r.get("error", "")]
         for r in rows],
        caption="per task: the largest task's memory, the slowest task's times, the busiest "
                "task's CPU while idle; registered: its pool; per channel: a channel's "
                "registered message buffers"))


def parser() -> argparse.ArgumentParser:
    """The benchmark's command-line options."""
    p = argparse.ArgumentParser(prog="tensorverbs bench scale", description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", type=int, nargs="+", default=[8, 16, 32], help="task counts (default 8 16 32)")
    p.add_argument("--protocols", nargs="+", choices=PROTOCOLS, default=list(PROTOCOLS))
    p.add_argument("--steps", type=int, default=5, help="steps per count (default 5; the first sets up)")
    p.add_argument("--size", default="64KiB", help="bytes each task sends each other task a step (default 64KiB)")
    p.add_argument("--timeout", type=float, default=120.0,
                   help="seconds a recv may take, and a peer to come up (default 120)")
    p.add_argument("--idle", type=float, default=IDLE_SECONDS,
                   help=f"seconds every task then sits idle, its CPU measured (default {IDLE_SECONDS:g})")
    p.add_argument("--json", default="scale.json", help="where the results go (default scale.json)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; the exit status (1 if a count failed)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    p = parser()
    args = p.parse_args(argv)
    if min(args.tasks) < 2 or args.steps < 1 or args.timeout <= 0 or args.idle <= 0:
        p.error("give --tasks >= 2, --steps >= 1, --timeout > 0 and --idle > 0")
    try:
        nbytes = parse_size(args.size)
    except ValueError as exc:
        p.error(str(exc))
    rows = report.run_counts(args.protocols, args.tasks, "tasks", lambda protocol, tasks: run_count(
        protocol, tasks, args.steps, nbytes, args.timeout, args.idle))
    show(rows)
    return report.conclude(args.json, {"results": rows}, ["scale", *argv])
