"""``bench transfer`` on tiny sizes: every contender's bytes arrive intact, CPU per
transfer and the in-flight rate are reported, every goal is stated, the JSON has its
fields, the plot is written. Timings are never asserted."""
from __future__ import annotations

import importlib.util
import json
import time

import numpy as np
import pytest

from tensorverbs.bench import busy, cpu_profile, transfer, transfer_goals
from tensorverbs.bench.contenders import by_name
from tensorverbs.bench.contenders import nixl as nixl_contender
from tensorverbs.bench.contenders.base import CALLS, FLIGHT_CALLS, payload, same_bytes

HAS_TORCH = importlib.util.find_spec("torch") is not None
NIXL, NIXL_ABOUT = nixl_contender.available()
SIZES = [4 << 10, 256 << 10]
CORE = ["grpc+verbs", "grpc+verbs tcp", "grpc", "memcpy", "raw unix", "raw tcp"]
FLYING = {"grpc+verbs", "grpc+verbs tcp", "grpc"}


def test_payload_is_the_same_in_every_call_and_checked_bytewise():
    a = payload(1 << 12)
    assert a.dtype == np.float32 and a.nbytes == 1 << 12
    assert same_bytes(payload(1 << 12), a)
    b = a.copy()
    b.view(np.uint8)[77] ^= 1
    assert not same_bytes(b, a)
    assert not same_bytes(a[:-1], a)


def test_sizes_grow_fourfold_and_end_at_the_largest():
    assert transfer.default_sizes(4 << 10, 64 << 20)[:3] == [4 << 10, 16 << 10, 64 << 10]
    assert transfer.default_sizes(4 << 10, 64 << 20)[-1] == 64 << 20
    assert transfer.default_sizes(4 << 10, 32 << 10) == [4 << 10, 16 << 10, 32 << 10]
    assert transfer.transfers_per_round(64 << 20, 64 << 20, 100) == 2
    assert transfer.transfers_per_round(4 << 10, 64 << 20, 100) == 100


def test_unknown_contender_is_refused():
    with pytest.raises(ValueError, match="nope"):
        by_name(["grpc", "nope"])


def test_core_contenders_move_the_right_bytes_and_count_cpu():
    result = transfer.run(by_name(CORE), SIZES, rounds=2, warmup=1, round_bytes=1 << 20,
                          max_transfers=3, in_flight=20, call_transfers=2)
    assert {(r["contender"], r["bytes"]) for r in result["results"]} == \
        {(name, n) for name in CORE for n in SIZES}
    for r in result["results"]:
        assert r["verified"] is True, r["contender"]
        assert r["seconds"]["count"] == 2 * 3 and r["gbps"] > 0
        assert r["cpu_us"]["receiver"] > 0
        assert (r["cpu_us"]["sender"] is None) == (r["contender"] == "memcpy")
    # every pair that keeps transfers in flight, with futures and in one batch call
    # (and memcpy's copy of the blocks into the same pages, the blocks' limit)
    assert {(r["contender"], r["call"]) for r in result["in_flight"]} == \
        {(name, call) for name in FLYING for call in FLIGHT_CALLS} | {("memcpy", "recv_blocks")}
    for r in result["in_flight"]:
        assert r["verified"] is True and r["in_flight"] == 20 and r["tensors_per_s"] > 0
        assert r["seconds"]["count"] == 2 and (r["cpu_us"]["sender"] is None) == (r["contender"] == "memcpy")
    # every way of calling, by every pair that can: a future only where recv_async is
    assert {(r["contender"], r["call"]) for r in result["calls"]} == \
        {(name, call) for name in CORE for call in CALLS
         if call == "recv" or (name != "memcpy" and (name in FLYING or "async" not in call))}
    for r in result["calls"]:
        assert r["verified"] is True and r["seconds"]["count"] == 2 * 2, r
        assert r["cpu_us"]["receiver"] > 0
    assert not any(s.get("failed") for s in result["contenders"].values())


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")
def test_torch_contenders_move_the_right_bytes():
    result = transfer.run(by_name(["tensorpipe", "gloo"]), SIZES, rounds=1, warmup=1,
                          round_bytes=1 << 20, max_transfers=2)
    assert len(result["results"]) == 4 and result["in_flight"] == []
    assert all(r["verified"] is True for r in result["results"])


@pytest.mark.skipif(not NIXL, reason=f"nixl: {NIXL_ABOUT}")
def test_nixl_moves_the_right_bytes():
    result = transfer.run(by_name(["nixl"]), SIZES, rounds=1, warmup=1, round_bytes=1 << 20,
                          max_transfers=2)
    assert not result["contenders"]["nixl"].get("failed"), result["contenders"]["nixl"]
    assert [(r["bytes"], r["verified"]) for r in result["results"]] == [(n, True) for n in SIZES]
    assert all(r["cpu_us"]["sender"] > 0 for r in result["results"])


def test_optional_contenders_say_why_they_are_skipped(monkeypatch):
    real = importlib.util.find_spec
    missing = {"torch", *nixl_contender.MODULES}
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in missing else real(name, *a))
    for contender in by_name(["tensorpipe", "gloo"]):
        ok, reason = contender.availability()
        assert not ok and "torch is not installed" in reason
    ok, reason = by_name(["nixl"])[0].availability()
    assert not ok and "pip install --no-deps nixl-cu12" in reason


def _row(name: str, nbytes: int, gbps: float, cpu: float = 10.0) -> dict:
    return {"contender": name, "bytes": nbytes, "gbps": gbps,
            "latency_us": {"median": nbytes / gbps / 1e3},
            "cpu_us": {"sender": cpu, "receiver": cpu}}


def test_every_goal_is_stated_and_judged_on_what_ran():
    small, large, largest = 4 << 10, 64 << 20, 256 << 20
    results = [_row("grpc+verbs", small, 0.2), _row("raw unix", small, 0.3),
               _row("nixl", small, 0.1), _row("grpc+verbs", large, 10.0),
               _row("memcpy", large, 12.0), _row("gloo", small, 0.1), _row("gloo", large, 11.0),
               _row("grpc+verbs", largest, 10.0), _row("tensorpipe", small, 0.1),
               _row("tensorpipe", largest, 2.0), _row("grpc+verbs read", small, 0.4)]
    results[0]["latency_us"]["p99"] = results[0]["latency_us"]["median"] * 4
    flight = [{"contender": "grpc+verbs", "call": call, "bytes": small, "in_flight": 2000,
               "tensors_per_s": rate} for call, rate in (("recv_async", 120_000.0), ("recv_many", 720_000.0))]
    calls = [{"contender": "grpc+verbs", "call": call, "bytes": small,
              "latency_us": {"median": us}} for call, us in (("recv", 5.0), ("recv after idle", 9.0))]
    blocks = [{"contender": name, "call": "recv_blocks", "bytes": small, "in_flight": 2000,
               "tensors_per_s": rate} for name, rate in (("grpc+verbs", 50_000.0), ("nixl", 100_000.0),
                                                         ("grpc+verbs read", 600_000.0),
                                                         ("memcpy", 1_500_000.0))]
    goals = transfer_goals.goals(results, flight + blocks, calls)
    assert len(goals) == 24 and len({g["goal"] for g in goals}) == 24

    def goal(text: str) -> dict:
        (found,) = [g for g in goals if text in g["goal"]]
        return found
    assert goal("round trip: grpc+verbs ≤ 0.5x raw unix")["ratio"] == pytest.approx(1.5)
    assert goal("round trip: grpc+verbs ≤ 0.5x raw unix")["met"] is False
    assert goal("round trip: grpc+verbs ≤ 0.5x nixl")["met"] is True
    assert goal("p99 ≤ 3x its median")["met"] is False
    assert goal("one-sided read: grpc+verbs read ≤ 0.5x")["ratio"] == pytest.approx(0.5)
    assert goal("4 KiB one-sided read: grpc+verbs read ahead of nixl")["met"] is True
    assert goal("64 MiB one-sided read")["met"] is None  # no nixl at 64 MiB
    slowest = goal("as applications call it")
    assert slowest["met"] is False and "worst recv after idle" in slowest["measured"]
    assert goal("≥ 150,000/s")["ratio"] == pytest.approx(0.8)
    assert goal("by recv_many: grpc+verbs ≥ 500,000/s")["met"] is True
    assert goal("recv_many ≥ 5x recv_async")["ratio"] == pytest.approx(6.0)
    assert goal("recv_many ≥ 5x recv_async")["met"] is True
    assert goal("recv_many ≥ 5x recv_async") != goal("by recv_many")
    assert goal("by recv_blocks: grpc+verbs ≥ 500,000/s")["ratio"] == pytest.approx(0.1)
    assert goal("recv_blocks ahead of nixl's prepared transfer")["ratio"] == pytest.approx(0.5)
    assert goal("recv_blocks ahead of nixl's prepared transfer")["met"] is False
    assert goal("by read_blocks: grpc+verbs read ≥ 500,000/s")["ratio"] == pytest.approx(1.2)
    assert goal("read_blocks ahead of nixl's prepared transfer")["ratio"] == pytest.approx(6.0)
    assert goal("read_blocks ahead of nixl's prepared transfer")["met"] is True
    assert goal("read_blocks ≥ 0.5x memcpy")["ratio"] == pytest.approx(0.4)
    assert goal("read_blocks ≥ 0.5x memcpy")["met"] is False
    no_nixl = next(g for g in transfer_goals.goals(results, flight + blocks[:1]) if "prepared" in g["goal"])
    assert no_nixl["met"] is None and "not measured" in no_nixl["measured"]
    no_batch = transfer_goals.goals(results, flight[:1])
    assert next(g for g in no_batch if "recv_many ≥ 5x" in g["goal"])["met"] is None
    other_size = transfer_goals.goals(results, [{**row, "bytes": 1024} for row in flight])
    for text in ("≥ 150,000/s", "by recv_many", "recv_many ≥ 5x"):  # the goals are of 4 KiB
        judged = next(g for g in other_size if text in g["goal"])
        assert judged["met"] is None and "not measured" in judged["measured"]
    assert goal("≥ 0.9x memcpy")["met"] is False
    gloo = goal("ahead of gloo")
    assert gloo["met"] is False and "at 64 MiB" in gloo["measured"]
    assert goal("every size 4 KiB-256 MiB: grpc+verbs ahead of nixl")["met"] is None  # 4 KiB only
    assert goal("≤ 10 µs on each side")["met"] is True
    assert goal("ahead of tensorpipe")["met"] is True
    assert goal("≥ 0.9x raw tcp")["met"] is None
    assert "not measured" in goal("≥ 0.9x raw tcp")["measured"]
    assert goal("as applications call it")["met"] is False
    assert "not measured" in transfer_goals.goals(results, flight)[3]["measured"]


def test_command_writes_json_and_plot(tmp_path):
    out, png = tmp_path / "t.json", tmp_path / "t.png"
    code = transfer.main(["--sizes", "4KiB,16KiB", "--rounds", "1", "--max-transfers", "2",
                          "--in-flight", "10", "--flight-size", "1KiB", "--call-transfers", "2", "--busy", "1",
                          "--contenders", "grpc+verbs,memcpy,raw unix",
                          "--json", str(out), "--plot", str(png)])
    assert code == 0
    data = json.loads(out.read_text())
    assert data["benchmark"] == "transfer" and data["command"].startswith("tensorverbs bench transfer")
    assert {"cpus", "python", "numpy"} <= set(data["machine"])
    assert data["settings"]["sizes"] == [4096, 16384] and data["settings"]["in_flight"] == 10
    assert data["settings"]["flight_bytes"] == 1024 and {r["bytes"] for r in data["in_flight"]} == {1024}
    assert data["settings"]["busy_neighbours"] == 1
    assert set(data["contenders"]) == {"grpc+verbs", "memcpy", "raw unix"}
    row = data["results"][0]
    assert {"contender", "bytes", "verified", "seconds", "gbps", "gbps_p25", "gbps_p75",
            "latency_us", "cpu_us"} <= set(row)
    assert {"median", "p99"} <= set(row["latency_us"])
    assert [(r["contender"], r["call"]) for r in data["in_flight"]] == [
        ("grpc+verbs", "recv_async"), ("grpc+verbs", "recv_async, wait"), ("grpc+verbs", "recv_many"),
        ("grpc+verbs", "recv_blocks"), ("memcpy", "recv_blocks")]
    assert {(r["contender"], r["call"]) for r in data["calls"]} == \
        {("grpc+verbs", call) for call in CALLS} | {("raw unix", "recv"), ("raw unix", "recv after idle"),
                                                    ("memcpy", "recv")}
    goal = next(g for g in data["goals"] if "round trip" in g["goal"])
    assert {"goal", "measured", "ratio", "met"} <= set(goal)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _cpu_ticks(pid: int) -> int:
    """The user and system CPU time of process `pid` so far, in clock ticks."""
    with open(f"/proc/{pid}/stat") as f:
        after_name = f.read().rsplit(")", 1)[1].split()
    return int(after_name[11]) + int(after_name[12])  # utime, stime


def test_busy_neighbours_compute_while_the_block_runs_and_are_gone_after():
    with busy.neighbours(2) as processes:
        assert len(processes) == 2
        deadline = time.monotonic() + 60
        while any(_cpu_ticks(p.pid) == 0 for p in processes) and time.monotonic() < deadline:
            time.sleep(0.01)  # polling what the kernel counts, until a deadline
        assert all(_cpu_ticks(p.pid) > 0 for p in processes), "a neighbour did not compute"
        assert all(p.is_alive() for p in processes)
    assert all(p.exitcode is not None for p in processes)


@pytest.mark.skipif(cpu_profile.unavailable() is not None, reason=str(cpu_profile.unavailable()))
def test_profile_shows_where_each_sides_cpu_goes_by_named_thread():
    pairs, status = transfer.start(by_name(["grpc+verbs"]), print)
    (pair,) = pairs
    turns = transfer.Turns(pairs, status)
    try:
        reports = cpu_profile.profile(pair, 1.0, lambda: turns.run(pair, 4 << 10, 20, False, False))
    finally:
        pair.close()
    assert set(reports) == {"sender", "receiver"}
    for side in reports.values():
        assert "%" in side["by_thread"] and "%" in side["by_symbol"]
    # the core's completion threads are named: their share is told apart from Python's
    assert any("tv-completion" in side["by_thread"] for side in reports.values()), reports
