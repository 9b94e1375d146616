"""``bench scale``: tasks started at once move all-to-all with the right bytes on both
protocols, and each count's figures reach the JSON. Timings are never asserted."""
from __future__ import annotations

import json

import pytest

from tensorverbs.bench import scale

#: a task that moves only 64 KiB tensors registers no more than this
SMALL_TENSORS_REGISTERED = 32 << 20
#: a channel's registered message buffers
PER_CHANNEL = 1 << 20


def test_tasks_started_at_once_move_all_to_all(tmp_path):
    out = tmp_path / "scale.json"
    assert scale.main(["--tasks", "3", "5", "--steps", "3", "--idle", "0.5", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["results"]
    assert [(r["protocol"], r["tasks"]) for r in rows] == [
        ("grpc", 3), ("grpc", 5), ("grpc+verbs", 3), ("grpc+verbs", 5)]
    for row in rows:
        assert "error" not in row
        assert row["setup_s"] > 0 and row["step_s"] > 0
        assert row["rss_peak_bytes"] >= row["pss_bytes"] > 0
        assert row["idle_cpu_pct"] >= 0
    for row in rows:
        if row["protocol"] == "grpc+verbs":
            assert 0 < row["registered_bytes"] <= SMALL_TENSORS_REGISTERED
            assert 0 < row["channel_bytes"] <= PER_CHANNEL
        else:
            assert row["registered_bytes"] == row["channel_bytes"] == 0


def test_a_count_that_fails_is_reported_and_fails_the_run(tmp_path):
    """A recv that cannot complete in time (1 ms for a first step's set-ups) fails the
    count with the error named; the run goes on and exits 1."""
    out = tmp_path / "scale.json"
    assert scale.main(["--tasks", "2", "--protocols", "grpc", "--steps", "1", "--timeout", "0.001", "--idle", "0.1",
                       "--json", str(out)]) == 1
    [row] = json.loads(out.read_text())["results"]
    assert "tensorverbs.errors.DeadlineExceededError" in row["error"] and "0.001 s" in row["error"]
    assert "setup_s" not in row


@pytest.mark.soak
def test_32_tasks_started_at_once_move_all_to_all(tmp_path):
    """The set-up storm of 32 tasks (992 channels) on both protocols: every task reaches
    every other and moves the right bytes (a task may take long to answer its first calls
    on a small machine: the recvs and the peers' start-up wait up to 10 minutes)."""
    out = tmp_path / "scale.json"
    assert scale.main(["--tasks", "32", "--steps", "2", "--idle", "1", "--timeout", "600",
                       "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["results"]
    assert [(r["protocol"], r["tasks"]) for r in rows] == [("grpc", 32), ("grpc+verbs", 32)]
    for row in rows:
        assert "error" not in row and row["setup_s"] > 0
        if row["protocol"] == "grpc+verbs":
            assert 0 < row["registered_bytes"] <= SMALL_TENSORS_REGISTERED
            assert 0 < row["channel_bytes"] <= PER_CHANNEL
