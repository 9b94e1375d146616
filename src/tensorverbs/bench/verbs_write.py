"""One-sided RDMA write bandwidth and 4 KiB round-trip latency of the soft provider
between two processes, beside the limits measured in the same run: a memcpy of the same
size (the same-host limit) and raw sockets with ``sendall``/``recv_into`` (the stream
limit).

Each figure is the median of ``rounds`` timed rounds after ``warmup`` untimed ones. A
write is timed from ``post_send`` to its completion at the requester, which comes once
the bytes are in the target's memory (copied there on one host, acknowledged by the
target over TCP).

    tensorverbs bench verbs --sizes 4KiB,1MiB,64MiB --rounds 10
"""
from __future__ import annotations

import argparse
import multiprocessing
import socket
import statistics
import struct
import sys
import time
from typing import Any, Callable

import numpy as np

from ..verbs import (
    Access, QPEndpoint, RdmaConfig, RecvWR, SendWR, WcOpcode, WrOpcode, get_provider,
)
from ..verbs.config import parse_size
from . import report
from .report import human_size

#: the soft provider's paths: label -> TENSORVERBS_SAME_HOST
PATHS = {"same-host": "auto", "tcp": "no"}
LATENCY_BYTES = 4096
TIMEOUT = 60.0
_LEN = struct.Struct("<QB")  # raw sockets: payload length, echo flag


# ---------------------------------------------------------------- the peer processes
def _verbs_peer(same_host: str, nbytes: int, conn: Any) -> None:
    """Target of the writes: drives its context and echoes each write-with-immediate."""
    ctx = get_provider("soft").open(RdmaConfig(provider="soft", same_host=same_host))
    pd = ctx.alloc_pd()
    cq = ctx.create_cq(256)
    qp = ctx.create_qp(pd, cq, cq, 64, 64)
    mr = pd.alloc_mr(nbytes, Access.all())
    conn.send((qp.endpoint().to_bytes(), mr.addr, mr.rkey))
    endpoint, raddr, rkey = conn.recv()
    qp.connect(QPEndpoint.from_bytes(endpoint))
    for i in range(64):
        qp.post_recv(RecvWR(i))
    conn.send("ready")
    while not conn.poll():
        for wc in cq.wait(timeout=0.2):
            if wc.opcode == WcOpcode.RECV_RDMA_WITH_IMM:
                qp.post_recv(RecvWR(wc.wr_id))
                qp.post_send(SendWR(0, WrOpcode.RDMA_WRITE_WITH_IMM, [mr.sge(0, wc.byte_len)],
                                    raddr, rkey, imm_data=wc.byte_len))
    ctx.close()


def _raw_peer(family: int, nbytes: int, conn: Any) -> None:
    """Raw socket sink: reads each payload with recv_into; acknowledges or echoes it."""
    server = socket.create_server(("127.0.0.1", 0)) if family == socket.AF_INET \
        else socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if family == socket.AF_UNIX:
        server.bind(f"\0tensorverbs-bench-{id(server)}")
        server.listen(1)
    conn.send(server.getsockname())
    sock, _ = server.accept()
    _tune(sock)
    view = memoryview(bytearray(nbytes))
    while True:
        n, echo = _LEN.unpack(_recv_exact(sock, view, _LEN.size))
        if n == 0:
            break
        _recv_exact(sock, view, n)
        sock.sendall(view[:n] if echo else b"k")
    sock.close()


def _recv_exact(sock: socket.socket, view: memoryview, n: int) -> memoryview:
    got = 0
    while got < n:
        k = sock.recv_into(view[got:n])
        if not k:
            raise ConnectionError("the peer closed the connection")
        got += k
    return view[:n]


def _tune(sock: socket.socket) -> None:
    if sock.family == socket.AF_INET:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _spawn(target: Callable[..., None], *args: Any) -> tuple[Any, Any]:
    mp = multiprocessing.get_context("spawn")
    conn, child = mp.Pipe()
    proc = mp.Process(target=target, args=(*args, child), daemon=True)
    proc.start()
    if not conn.poll(TIMEOUT):
        proc.kill()
        raise RuntimeError("the benchmark's peer process did not start")
    return proc, conn


# ------------------------------------------------------------------------ measuring
def _median(fn: Callable[[], float], rounds: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    return statistics.median(fn() for _ in range(rounds))


def _memcpy(size: int, rounds: int, warmup: int) -> float:
    src = np.ones(size, np.uint8)
    dst = np.zeros(size, np.uint8)

    def once() -> float:
        t = time.perf_counter()
        np.copyto(dst, src)
        return time.perf_counter() - t
    return _median(once, rounds, warmup)


def _raw(family: int, sizes: list[int], rounds: int, warmup: int, latency: bool) -> dict:
    """Seconds per transfer of each size, and per 4 KiB round trip, over raw sockets."""
    proc, conn = _spawn(_raw_peer, family, max(sizes + [LATENCY_BYTES]))
    address = conn.recv()
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.connect(address)
    _tune(sock)
    data = memoryview(np.ones(max(sizes + [LATENCY_BYTES]), np.uint8))
    back = memoryview(bytearray(LATENCY_BYTES))

    def transfer(n: int, echo: bool) -> float:
        t = time.perf_counter()
        sock.sendall(_LEN.pack(n, echo))
        sock.sendall(data[:n])
        _recv_exact(sock, back, n if echo else 1)
        return time.perf_counter() - t
    try:
        out = {"write": {n: _median(lambda: transfer(n, False), rounds, warmup) for n in sizes}}
        if latency:
            out["rtt"] = _median(lambda: transfer(LATENCY_BYTES, True), 20 * rounds, warmup)
        sock.sendall(_LEN.pack(0, False))
    finally:
        sock.close()
        proc.join(TIMEOUT)
    return out


class _VerbsRequester:
    """Side A: writes into the peer's region and waits for the completions."""

    def __init__(self, same_host: str, nbytes: int) -> None:
        self.proc, self.conn = _spawn(_verbs_peer, same_host, nbytes)
        self.ctx = get_provider("soft").open(RdmaConfig(provider="soft", same_host=same_host))
        pd = self.ctx.alloc_pd()
        self.cq = self.ctx.create_cq(256)
        self.qp = self.ctx.create_qp(pd, self.cq, self.cq, 64, 64)
        self.src = pd.alloc_mr(nbytes, Access.all())
        np.frombuffer(self.src.buf, np.uint8)[:] = 1
        self.echo = pd.alloc_mr(LATENCY_BYTES, Access.all())
        endpoint, self.raddr, self.rkey = self.conn.recv()
        self.qp.connect(QPEndpoint.from_bytes(endpoint))
        self.conn.send((self.qp.endpoint().to_bytes(), self.echo.addr, self.echo.rkey))
        if not self.conn.poll(TIMEOUT) or self.conn.recv() != "ready":
            raise RuntimeError("the benchmark's verbs peer did not connect")
        for i in range(8):
            self.qp.post_recv(RecvWR(i))

    def _until(self, opcode: WcOpcode) -> None:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            for wc in self.cq.wait(timeout=deadline - time.monotonic()):
                if not wc.ok:
                    raise RuntimeError(f"benchmark write failed: {wc}")
                if wc.opcode == WcOpcode.RECV_RDMA_WITH_IMM:
                    self.qp.post_recv(RecvWR(wc.wr_id))
                if wc.opcode == opcode:
                    return
        raise RuntimeError(f"no {opcode.name} completion within {TIMEOUT} s")

    def write(self, n: int) -> float:
        t = time.perf_counter()
        self.qp.post_send(SendWR(1, WrOpcode.RDMA_WRITE, [self.src.sge(0, n)], self.raddr, self.rkey))
        self._until(WcOpcode.RDMA_WRITE)
        return time.perf_counter() - t

    def round_trip(self) -> float:
        t = time.perf_counter()
        self.qp.post_send(SendWR(2, WrOpcode.RDMA_WRITE_WITH_IMM, [self.src.sge(0, LATENCY_BYTES)],
                                 self.raddr, self.rkey, imm_data=LATENCY_BYTES))
        self._until(WcOpcode.RECV_RDMA_WITH_IMM)
        return time.perf_counter() - t

    def close(self) -> None:
        self.conn.send("stop")
        self.proc.join(TIMEOUT)
        self.ctx.close()


def _verbs(same_host: str, sizes: list[int], rounds: int, warmup: int, latency: bool) -> dict:
    req = _VerbsRequester(same_host, max(sizes + [LATENCY_BYTES]))
    try:
        out = {"write": {n: _median(lambda: req.write(n), rounds, warmup) for n in sizes}}
        if latency:
            out["rtt"] = _median(req.round_trip, 20 * rounds, warmup)
        return out
    finally:
        req.close()


def run(sizes: list[int], rounds: int, warmup: int = 2, latency: bool = True) -> dict:
    """Measure everything; returns ``{"bandwidth": [row per size], "latency_us": {...}}``
    with bandwidths in GB/s (10^9 bytes per second)."""
    raw_tcp = _raw(socket.AF_INET, sizes, rounds, warmup, latency)
    raw_unix = _raw(socket.AF_UNIX, [LATENCY_BYTES], rounds, warmup, latency) if latency else {}
    soft = {label: _verbs(mode, sizes, rounds, warmup, latency) for label, mode in PATHS.items()}
    rows = []
    for n in sizes:
        memcpy = n / _memcpy(n, rounds, warmup) / 1e9
        tcp = n / raw_tcp["write"][n] / 1e9
        shm = n / soft["same-host"]["write"][n] / 1e9
        soft_tcp = n / soft["tcp"]["write"][n] / 1e9
        rows.append({"bytes": n, "memcpy": memcpy, "soft_same_host": shm,
                     "same_host_vs_memcpy": shm / memcpy, "raw_tcp": tcp, "soft_tcp": soft_tcp,
                     "tcp_vs_raw": soft_tcp / tcp})
    result: dict[str, Any] = {"rounds": rounds, "warmup": warmup, "bandwidth": rows}
    if latency:
        result["latency_us"] = {
            "soft_same_host": soft["same-host"]["rtt"] * 1e6, "raw_unix": raw_unix["rtt"] * 1e6,
            "soft_tcp": soft["tcp"]["rtt"] * 1e6, "raw_tcp": raw_tcp["rtt"] * 1e6}
    return result


# --------------------------------------------------------------------------- report
def _show(result: dict) -> None:
    rows = [[human_size(r["bytes"]), f"{r['memcpy']:.2f}", f"{r['soft_same_host']:.2f}",
             f"{r['same_host_vs_memcpy']:.2f}x", f"{r['raw_tcp']:.2f}", f"{r['soft_tcp']:.2f}",
             f"{r['tcp_vs_raw']:.2f}x"] for r in result["bandwidth"]]
    report.console.print(report.table(
        "soft provider: one-sided RDMA write between two processes (GB/s, median)",
        ["size", "memcpy", "soft same-host", "vs memcpy", "raw TCP", "soft TCP", "vs raw TCP"],
        rows))
    if "latency_us" in result:
        lat = result["latency_us"]
        report.console.print(report.table(
            f"{human_size(LATENCY_BYTES)} round trip (us, median)",
            ["path", "soft write-with-imm", "raw socket"],
            [["same host (Unix socket)", f"{lat['soft_same_host']:.1f}", f"{lat['raw_unix']:.1f}"],
             ["TCP", f"{lat['soft_tcp']:.1f}", f"{lat['raw_tcp']:.1f}"]]))


def main(argv: list[str] | None = None) -> int:
    """Run ``tensorverbs bench verbs``; the exit status."""
    parser = argparse.ArgumentParser(prog="tensorverbs bench verbs", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="64MiB",
                        help="comma-separated write sizes (default: 64MiB)")
    parser.add_argument("--rounds", type=int, default=10, help="timed rounds per figure")
    parser.add_argument("--warmup", type=int, default=2, help="untimed rounds first")
    parser.add_argument("--no-latency", action="store_true", help="skip the round-trip figures")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args(argv)
    try:
        sizes = [parse_size(s) for s in args.sizes.split(",") if s.strip()]
    except ValueError as exc:
        parser.error(f"--sizes: cannot read {exc}")
    if not sizes or args.rounds < 1 or args.warmup < 0:
        parser.error("give at least one size, --rounds >= 1 and --warmup >= 0")
    result = run(sizes, args.rounds, args.warmup, latency=not args.no_latency)
    _show(result)
    if args.json:
        report.write_json(args.json, result, ["verbs", *(sys.argv[1:] if argv is None else argv)])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
