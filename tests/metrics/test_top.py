"""``tensorverbs top --once`` against a live cluster, and against an endpoint that is down."""
from __future__ import annotations

import os
import subprocess
import sys

from rich.filesize import decimal
from variants import Pair

from tensorverbs.local_cluster import free_port, pattern, same

PS, WORKER = Pair.PS, Pair.WORKER
TOP = [sys.executable, "-m", "tensorverbs", "top", "--once", "--interval", "0.2"]
#: the columns of the totals, from the table's header
COLUMNS = ("task", "peer", "state", "tensors recv", "bytes recv", "tensors sent", "bytes sent",
           "pool in use / registered")


def _top(*endpoints: str) -> subprocess.CompletedProcess:
    return subprocess.run([*TOP, *endpoints], check=False, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONIOENCODING="utf-8"))


def _rows(out: str) -> list[dict[str, str]]:
    """The table's rows, each as {column: cell}."""
    lines = [[cell.strip() for cell in line.split("│")[1:-1]] for line in out.splitlines() if "│" in line]
    header, rows = lines[0], lines[1:]
    assert set(COLUMNS) <= set(header), header
    return [dict(zip(header, row)) for row in rows]


def test_top_once_shows_each_task_and_its_totals(metered, step):
    pair = metered.pair
    pair.ps.send_pattern("w", WORKER, step, 50_000, 1)
    assert same(pair.worker.recv("w", PS, step, timeout=60), pattern(50_000, 1))
    pair.worker.send("g", pattern(7000, 2), PS, step)
    assert pair.ps.recv_pattern("g", WORKER, step, 7000, 2, timeout=60)
    stats = {task: metered.settled(task)[0] for task in (PS, WORKER)}

    result = _top(metered.address(PS), metered.address(WORKER))

    assert result.returncode == 0, result.stderr
    rows = {(row["task"], row["peer"]): row for row in _rows(result.stdout)}
    assert set(rows) == {(PS, "all"), (PS, WORKER), (WORKER, "all"), (WORKER, PS)}
    for task, peer in [(PS, WORKER), (WORKER, PS)]:
        own, s = rows[(task, "all")], stats[task]
        assert own["state"] == f"up {metered.protocol}"
        assert (own["tensors recv"], own["bytes recv"], own["tensors sent"], own["bytes sent"]) == (
            str(s["tensors_received"]), str(s["bytes_received"]), str(s["tensors_sent"]), str(s["bytes_sent"]))
        # every tensor a task received came from its one peer
        assert (rows[(task, peer)]["tensors recv"], rows[(task, peer)]["bytes recv"]) == (
            str(s["tensors_received"]), str(s["bytes_received"]))
        pool = own["pool in use / registered"]
        if metered.protocol == "grpc+verbs":
            assert pool == f"{decimal(s['pool_in_use_bytes'])} / {decimal(s['registered_bytes'])}"
        else:
            assert pool == "-"


def test_top_shows_an_unreachable_endpoint_as_down():
    endpoint = f"127.0.0.1:{free_port()}"  # nothing listens there
    result = _top(endpoint)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    [row] = _rows(result.stdout)
    assert row["task"] == endpoint
    assert row["state"].startswith("down:") and "refused" in row["state"]
