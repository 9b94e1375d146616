"""``bench transfer`` on tiny sizes: every contender's bytes arrive intact, the JSON has
its fields, the plot is written. Timings are never asserted."""
from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from tensorverbs.bench import transfer
from tensorverbs.bench.contenders import by_name
from tensorverbs.bench.contenders.base import payload, same_bytes

HAS_TORCH = importlib.util.find_spec("torch") is not None
SIZES = [4 << 10, 256 << 10]
CORE = ["grpc+verbs", "grpc+verbs tcp", "grpc", "memcpy", "raw unix", "raw tcp"]


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


def test_core_contenders_move_the_right_bytes():
    result = transfer.run(by_name(CORE), SIZES, rounds=2, warmup=1, round_bytes=1 << 20,
                          max_transfers=3)
    assert {(r["contender"], r["bytes"]) for r in result["results"]} == \
        {(name, n) for name in CORE for n in SIZES}
    for r in result["results"]:
        assert r["verified"] is True, r["contender"]
        assert r["seconds"]["count"] == 2 * 3 and r["gbps"] > 0
    assert not any(s.get("failed") for s in result["contenders"].values())


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")
def test_torch_contenders_move_the_right_bytes():
    result = transfer.run(by_name(["tensorpipe", "gloo"]), SIZES, rounds=1, warmup=1,
                          round_bytes=1 << 20, max_transfers=2)
    assert len(result["results"]) == 4
    assert all(r["verified"] is True for r in result["results"])


def test_torch_contenders_say_why_they_are_skipped(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    for contender in by_name(["tensorpipe", "gloo"]):
        ok, reason = contender.availability()
        assert not ok and "torch is not installed" in reason


def test_command_writes_json_and_plot(tmp_path):
    out, png = tmp_path / "t.json", tmp_path / "t.png"
    code = transfer.main(["--sizes", "4KiB,16KiB", "--rounds", "1", "--max-transfers", "2",
                          "--contenders", "grpc+verbs,memcpy,raw unix", "--json", str(out),
                          "--plot", str(png)])
    assert code == 0
    data = json.loads(out.read_text())
    assert data["benchmark"] == "transfer" and data["command"].startswith("tensorverbs bench transfer")
    assert {"cpus", "python", "numpy"} <= set(data["machine"])
    assert data["settings"]["sizes"] == [4096, 16384]
    assert set(data["contenders"]) == {"grpc+verbs", "memcpy", "raw unix"}
    row = data["results"][0]
    assert {"contender", "bytes", "verified", "seconds", "gbps", "gbps_p25", "gbps_p75",
            "latency_us"} <= set(row)
    assert {"median", "p99"} <= set(row["latency_us"])
    goal = next(g for g in data["goals"] if "round trip" in g["goal"])
    assert {"goal", "measured", "ratio", "met"} <= set(goal)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
