"""``bench sync``: a trainer's parameters reach every receiver (bytes checked in the
receivers), every way (sends, broadcast, relay, one-sided reads, and gloo's broadcast
where torch is installed), and the figures reach
the JSON; a broadcast or a relay registers each large tensor once where sends register it
once per receiver, and reads register nothing per round; with ``--hosts`` every task is a
host of its own behind a shaped link. Timings are never asserted."""
from __future__ import annotations

import json

import pytest

from tensorverbs import netns
from tensorverbs.bench import sync, sync_gloo
from tensorverbs.bench.contenders import nixl

NIXL, NIXL_ABOUT = nixl.available()
GLOO, GLOO_ABOUT = sync_gloo.available()


def test_weight_sync_reaches_every_receiver_every_way(tmp_path):
    out = tmp_path / "sync.json"
    assert sync.main(["--total", "8MiB", "--tensors", "11", "--receivers", "1", "3", "--rounds", "1",
                      "--protocols", "grpc", "grpc+verbs", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    rows = result["results"]
    assert [(r["protocol"], r["receivers"]) for r in rows] == [
        ("grpc", 1), ("grpc", 3), ("grpc+verbs", 1), ("grpc+verbs", 3)]
    for row in rows:
        assert "error" not in row and row["tensors"] == 11
        for way in sync.ways():
            assert len(row[way]["seconds"]) == 1 and row[way]["gbps"] > 0
    verbs = {r["receivers"]: r for r in rows if r["protocol"] == "grpc+verbs"}
    matrices = 6  # a layer's tensors large enough to be registered rather than staged
    assert verbs[1]["sends"]["registrations"] == verbs[1]["broadcast"]["registrations"] == matrices
    assert verbs[3]["sends"]["registrations"] == 3 * matrices
    assert verbs[3]["broadcast"]["registrations"] == matrices
    assert verbs[3]["relay"]["registrations"] == matrices  # sent to the first receiver only
    assert all(r["reads"]["registrations"] == 0 and r["reads_vs_sends"] > 0 for r in rows)
    assert all(r[way]["registrations"] == 0 for r in rows if r["protocol"] == "grpc" for way in sync.WAYS)
    goals = result["goals"]  # judged on a run to 4 receivers only
    assert [g["goal"] for g in goals] == ["broadcast to 4 <= 0.8x 4 sends", "reads by 4 ahead of NIXL's READ",
                                          "relay to 4 <= 1.3x relay to 1", "relay to 8 <= 1.5x relay to 1",
                                          "relay to 4 ahead of gloo's broadcast", "relay to 8 ahead of gloo's broadcast",
                                          "a receiver killed mid-relay: the others within 2x a round, it named",
                                          "a late joiner served by replicas, the trainer's link idle (< 1% of the bytes)"]
    assert all(g["met"] is None and "no grpc+verbs" in g["measured"] for g in goals)


@pytest.mark.skipif(netns.unavailable_reason() is not None, reason=f"{netns.unavailable_reason()}")
def test_every_task_a_host_of_its_own_behind_a_shaped_link(tmp_path):
    out = tmp_path / "sync.json"
    assert sync.main(["--hosts", "--link-rate", "500mbit", "--total", "2MiB", "--tensors", "11",
                      "--receivers", "1", "2", "--rounds", "1", "--ways", "sends", "relay", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["results"]
    assert [(r["receivers"], r["link_rate"]) for r in rows] == [(1, "500mbit"), (2, "500mbit")]
    for row in rows:
        assert "error" not in row and "broadcast" not in row
        assert row["relay"]["gbps"] > 0 and row["relay_vs_sends"] > 0
        if GLOO:  # gloo's group across the hosts, each member on its own link
            assert row[sync.GLOO_WAY]["gbps"] > 0 and row["relay_vs_gloo"] > 0


def test_a_link_rate_tc_does_not_take_is_refused(capsys):
    with pytest.raises(SystemExit):
        sync.main(["--link-rate", "fast"])
    assert "--link-rate" in capsys.readouterr().err


@pytest.mark.skipif(not NIXL, reason=f"nixl: {NIXL_ABOUT}")
def test_nixl_reads_reach_every_receiver(tmp_path):
    """NIXL's READ as a way of its own (bytes checked in the receivers), compared with the
    one-sided reads in each row, and the goal judged on a run to 4."""
    out = tmp_path / "sync.json"
    assert sync.main(["--total", "4MiB", "--tensors", "11", "--receivers", "1", "4", "--rounds", "1",
                      "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    for row in result["results"]:
        assert "error" not in row, row["error"]
        assert len(row[sync.NIXL_WAY]["seconds"]) == 1 and row["reads_vs_nixl"] > 0
    reads_goal = result["goals"][1]
    assert reads_goal["met"] is not None and "NIXL's time" in reads_goal["measured"]


@pytest.mark.skipif(not GLOO, reason=f"gloo: {GLOO_ABOUT}")
@pytest.mark.parametrize("total, tensors", [("4MiB", "11"), ("16MiB", "1")])  # (one: relayed in parts)
def test_gloo_broadcast_reaches_every_receiver(tmp_path, total, tensors):
    """gloo's broadcast as a way of its own (bytes checked in the receivers), compared with
    the relay in each row."""
    out = tmp_path / "sync.json"
    assert sync.main(["--total", total, "--tensors", tensors, "--receivers", "1", "3", "--rounds", "1",
                      "--ways", "relay", "--json", str(out)]) == 0
    for row in json.loads(out.read_text())["results"]:
        assert "error" not in row, row["error"]
        assert len(row[sync.GLOO_WAY]["seconds"]) == 1 and row["relay_vs_gloo"] > 0


def test_a_receiver_killed_mid_relay_is_named_and_the_others_checked(tmp_path):
    """With --kill, a last relay round in which the chain's first receiver dies once it has
    the first tensor: the survivors' bytes are checked, the trainer's handles that failed
    name the dead receiver only, and the goal is judged."""
    out = tmp_path / "sync.json"
    assert sync.main(["--total", "4MiB", "--tensors", "11", "--receivers", "1", "3", "--rounds", "1",
                      "--ways", "relay", "--kill", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    one, three = result["results"]
    assert "killed" not in one  # no one to route around
    assert three["killed"]["failed_handles"] > 0 and three["killed"]["dead_named"] is True
    killed_goal = result["goals"][-2]
    assert killed_goal["met"] is not None and "at 3, named" in killed_goal["measured"]


def test_a_late_joiner_is_served_by_the_receivers_that_have_the_tensors(tmp_path):
    """With --late, a relay round to all receivers but the last, which then asks for every
    tensor: its bytes are checked, and the trainer sends it a descriptor per tensor only."""
    out = tmp_path / "sync.json"
    assert sync.main(["--total", "16MiB", "--tensors", "11", "--receivers", "1", "3", "--rounds", "1",
                      "--ways", "relay", "--late", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    one, three = result["results"]
    assert "late" not in one  # nobody to be served by
    assert "error" not in three["late"], three["late"]
    assert 0 < three["late"]["trainer_bytes"] < 11 * 4096, three["late"]
    late_goal = result["goals"][-1]
    assert late_goal["met"] is True and "a late joiner" in late_goal["goal"], late_goal


def test_shapes_are_a_transformers_layers():
    shapes = sync.layer_shapes(1 << 30, 300)
    assert len(shapes) % sync.PER_LAYER == 0 and abs(len(shapes) - 300) <= sync.PER_LAYER
    total = sum(4 * (s[0] * (s[1] if len(s) > 1 else 1)) for s in shapes)
    assert 0.8 * (1 << 30) <= total <= 1.2 * (1 << 30)


def test_fewer_tensors_than_a_layer_are_equal_flat_ones():
    assert sync.layer_shapes(64 << 20, 1) == [(16 << 20,)]
    assert sync.layer_shapes(64 << 20, 4) == [(4 << 20,)] * 4
