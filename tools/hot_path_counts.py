"""Count what the tensorverbs core does per 4 KiB tensor on grpc+verbs, on each side, in
steady state: heap allocations (malloc, calloc, realloc, operator new), mutex locks,
condition-variable notifies and waits, made by the core's own code.

    python tools/hot_path_counts.py [--transfers N] [--call recv|recv_async|blocks|read_blocks] [--sites LIB]

Builds tools/hot_path_counts.cc (g++) into a temporary directory and preloads it into two
processes of this interpreter, a sender and a receiver on loopback. After a warm-up the
sender offers N tensors (``send``) and flushes; the receiver receives them (``recv`` with
a timeout, or ``recv_async`` and then ``result()``). With ``--call blocks`` the N tensors
are the rows of one buffer, sent by one ``send_blocks`` and received by one ``recv_blocks``
into an ``allocate()``d buffer, three such batches warm and three counted; with ``--call
read_blocks`` the sender registers the rows and the receiver reads them one-sided with
one ``read_blocks`` a batch. Each side counts from the end of its
warm-up to its last tensor and prints its counts divided by N. With ``--sites LIB`` each
count is attributed to its call site (addr2line) in LIB, an unstripped build of the same
core, e.g. ``pip install -e . -Cbuild-dir=build/dbg -Ccmake.build-type=RelWithDebInfo``
then LIB = build/dbg/binding/_core*.so.
"""
from __future__ import annotations

import argparse
import collections
import ctypes
import os
import pathlib
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
WARMUP = 500
BATCHES = 3  # batches of blocks warm, and counted (--call blocks)
KINDS = ("alloc", "lock", "notify", "wait")


def side(role: str, library: str, ports: list[int], transfers: int, call: str, out: str) -> None:
    """One process of the pair: warm up, count, dump the counts to ``out``."""
    import numpy as np

    import tensorverbs as tv

    counts = ctypes.CDLL(library)
    cluster = tv.ClusterSpec({"ps": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{ports[1]}"]})
    tensor = np.arange(1024, dtype=np.float32)
    warm, timed = range(WARMUP), range(WARMUP, WARMUP + transfers)
    if call in ("blocks", "read_blocks"):
        (blocks if call == "blocks" else read_blocks)(tv, counts, cluster, role, transfers, out)
        return
    if role == "send":
        server = tv.Server(cluster, job_name="ps", task_index=0, protocol="grpc+verbs")
        for steps in (warm, timed):
            if steps is timed:
                counts.hot_path_counts_start()
            for step in steps:
                server.send("t", tensor, to="/job:worker/task:0", step_id=step)
            server.flush(timeout=120)
    else:
        server = tv.Server(cluster, job_name="worker", task_index=0, protocol="grpc+verbs")
        for step in warm:
            server.recv("t", source="/job:ps/task:0", step_id=step, timeout=120)
        counts.hot_path_counts_start()
        if call == "recv":
            for step in timed:
                server.recv("t", source="/job:ps/task:0", step_id=step, timeout=120)
        else:
            futures = [server.recv_async("t", source="/job:ps/task:0", step_id=step, timeout=120)
                       for step in timed]
            for future in futures:
                future.result()
    counts.hot_path_counts_dump(out.encode())
    server.stop()


def blocks(tv, counts, cluster, role: str, transfers: int, out: str) -> None:
    """:func:`side` of ``--call blocks``: BATCHES batches warm, BATCHES counted."""
    import numpy as np

    warm, timed = range(BATCHES), range(BATCHES, 2 * BATCHES)
    sender = role == "send"
    server = tv.Server(cluster, job_name="ps" if sender else "worker", task_index=0, protocol="grpc+verbs")
    rows = np.ones((transfers, 1024), np.float32) if sender else server.allocate((transfers, 1024), np.float32)
    for steps in (warm, timed):
        if steps is timed:
            counts.hot_path_counts_start()
        for step in steps:
            if sender:
                server.send_blocks("t", rows, "/job:worker/task:0", step)
            else:
                server.recv_blocks("t", "/job:ps/task:0", rows, step, timeout=120)
        if sender:
            server.flush(timeout=120)
    counts.hot_path_counts_dump(out.encode())
    server.stop()


def read_blocks(tv, counts, cluster, role: str, transfers: int, out: str) -> None:
    """:func:`side` of ``--call read_blocks``: the sender registers N rows (memory for
    one-sided access) and hands their RemoteBuffer over; the receiver reads them all with
    one ``read_blocks`` into the pages (a fixed permutation) of a buffer of its own,
    BATCHES batches warm and BATCHES counted. The owner counts while the reads run."""
    import pickle

    import numpy as np

    sender = role == "send"
    server = tv.Server(cluster, job_name="ps" if sender else "worker", task_index=0, protocol="grpc+verbs")
    rows = server.allocate((transfers, 1024), np.float32, one_sided=True)
    if sender:
        rows[...] = 1.0
        server.send("rows", np.frombuffer(pickle.dumps(server.register(rows)), np.uint8), to="/job:worker/task:0")
        server.recv("warm", "/job:worker/task:0", timeout=120)
        counts.hot_path_counts_start()
        server.recv("done", "/job:worker/task:0", timeout=120)
    else:
        buffer = pickle.loads(server.recv("rows", "/job:ps/task:0", timeout=120).tobytes())
        blocks, pages = np.arange(transfers), np.random.default_rng(transfers).permutation(transfers)
        for _ in range(BATCHES):
            server.read_blocks(buffer, rows, blocks, index=pages, timeout=120)
        server.send("warm", np.zeros(1), to="/job:ps/task:0")
        counts.hot_path_counts_start()
        for _ in range(BATCHES):
            server.read_blocks(buffer, rows, blocks, index=pages, timeout=120)
        counts.hot_path_counts_dump(out.encode())
        server.send("done", np.zeros(1), to="/job:ps/task:0")
        server.flush(timeout=120)
        server.stop()
        return
    counts.hot_path_counts_dump(out.encode())
    server.stop()


def read(path: str) -> list[tuple[str, int, int]]:
    """(kind, offset, count) of each call site a side's dump lists."""
    rows = []
    for line in pathlib.Path(path).read_text().split("\n"):
        if line:
            kind, offset, count = line.split()
            rows.append((kind, int(offset, 16), int(count)))
    return rows


def site(library: str, offset: int) -> str:
    """The functions at ``offset`` of ``library``, innermost first (inlined ones too)."""
    out = subprocess.run(["addr2line", "-f", "-C", "-i", "-e", library, hex(offset)],
                         capture_output=True, text=True, check=False).stdout.split("\n")
    names = [name.split("(")[0] for name in out[0::2] if name and not name.startswith("std::")]
    return " < ".join(names)[:160] or "?"


def report(name: str, rows: list[tuple[str, int, int]], transfers: int, sites: str | None) -> None:
    totals: collections.Counter[str] = collections.Counter()
    for kind, _, count in rows:
        totals[kind] += count
    print(f"{name}: " + ", ".join(f"{kind} {totals[kind] / transfers:.2f}" for kind in KINDS)
          + " per tensor")
    if sites:
        for kind, offset, count in sorted(rows, key=lambda row: -row[2]):
            if count >= transfers // 4:
                print(f"  {kind:<6} {count / transfers:6.2f}  {site(sites, offset)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--transfers", type=int, default=2000, help="tensors counted (default 2000)")
    parser.add_argument("--call", choices=("recv", "recv_async", "blocks", "read_blocks"), default="recv",
                        help="how the receiver receives (default recv; blocks: batches of rows; "
                             "read_blocks: batches of rows read one-sided)")
    parser.add_argument("--sites", metavar="LIB", help="attribute the counts to call sites in LIB")
    parser.add_argument("--side", nargs=4, metavar=("ROLE", "LIB", "PORTS", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        role, library, ports, out = args.side
        side(role, library, [int(p) for p in ports.split(",")], args.transfers, args.call, out)
        return
    from tensorverbs.ports import free_port

    with tempfile.TemporaryDirectory(prefix="hot-path-") as tmp:
        library = os.path.join(tmp, "hot_path_counts.so")
        subprocess.run(["g++", "-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC",
                        "-o", library, str(HERE / "hot_path_counts.cc"), "-ldl"], check=True)
        first = free_port()
        ports = f"{first},{free_port(taken=[first])}"
        env = {**os.environ, "LD_PRELOAD": library}
        outs = {role: os.path.join(tmp, f"{role}.txt") for role in ("send", "recv")}
        children = [subprocess.Popen([sys.executable, __file__, "--transfers", str(args.transfers),
                                      "--call", args.call, "--side", role, library, ports, out], env=env)
                    for role, out in outs.items()]
        if any(child.wait(timeout=600) != 0 for child in children):
            raise SystemExit("a side failed")
        counted = args.transfers * (BATCHES if args.call in ("blocks", "read_blocks") else 1)
        for role, name in (("send", "sender"), ("recv", f"receiver ({args.call})")):
            report(name, read(outs[role]), counted, args.sites)


if __name__ == "__main__":
    main()
