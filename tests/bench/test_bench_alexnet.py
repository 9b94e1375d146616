"""``bench alexnet`` on tiny tensors and few steps: the weights reach every worker and
the gradients the ps intact, the JSON has its fields. Timings are never asserted."""
from __future__ import annotations

import importlib.util
import json
import math

import pytest

from tensorverbs.bench import alexnet, model
from tensorverbs.bench.contenders import by_name

HAS_TORCH = importlib.util.find_spec("torch") is not None
TINY = [("conv.weight", (4, 3, 3, 3)), ("conv.bias", (4,)), ("fc.weight", (10, 300)), ("fc.bias", (10,))]


def test_parameter_table_matches_the_model():
    torch = pytest.importorskip("torch")
    net = model.alexnet()
    assert [(n, tuple(p.shape)) for n, p in net.named_parameters()] == model.PARAMETER_SHAPES
    assert sum(p.numel() for p in net.parameters()) == model.PARAMETERS
    assert 60e6 < model.PARAMETERS < 62e6
    out = net(torch.zeros(1, 3, model.IMAGE_SIZE, model.IMAGE_SIZE))
    assert tuple(out.shape) == (1, model.CLASSES)


def test_steps_split_into_even_blocks():
    assert alexnet._blocks(20, 4) == [5, 5, 5, 5]
    assert alexnet._blocks(7, 3) == [3, 2, 2]
    assert alexnet._blocks(2, 5) == [1, 1]


def test_both_protocols_deliver_every_tensor_with_two_workers():
    runs = alexnet.train(by_name(["grpc", "grpc+verbs"]), [1, 2], steps=3, warmup=1, rounds=2,
                         batch=1, compute=False, shapes=TINY, verify=True)
    assert [(r["protocol"], r["workers"]) for r in runs] == \
        [("grpc", 1), ("grpc+verbs", 1), ("grpc", 2), ("grpc+verbs", 2)]
    for r in runs:
        assert r["verified"] is True
        assert [s["step"] for s in r["steps"]] == [0, 1, 2, 3]
        assert r["timed_steps"] == 3 and r["steps_per_s"]["mean"] > 0
        assert all(len(s["workers"]) == r["workers"] for s in r["steps"])
        assert not math.isnan(r["scaling_efficiency"])


def test_goal_is_judged_only_without_compute():
    runs = [{"protocol": "grpc+verbs", "workers": 2, "steps_per_s": {"mean": 7.0}},
            {"protocol": "grpc", "workers": 2, "steps_per_s": {"mean": 1.0}}]
    (goal,) = alexnet.goals(runs, compute=False)
    assert not goal["met"] and goal["ratio"] == 7.0  # the goal is 10x
    runs[0]["steps_per_s"]["mean"] = 10.0
    assert alexnet.goals(runs, compute=False)[0]["met"]
    assert alexnet.goals(runs, compute=True) == []


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")
def test_command_trains_the_real_model_and_writes_json_and_plot(tmp_path):
    out, png = tmp_path / "a.json", tmp_path / "a.png"
    code = alexnet.main(["--compute", "torch", "--workers", "1", "--steps", "1", "--warmup", "0",
                         "--batch", "1", "--protocols", "grpc+verbs", "--verify",
                         "--json", str(out), "--plot", str(png)])
    assert code == 0
    data = json.loads(out.read_text())
    assert data["benchmark"] == "alexnet" and data["settings"]["compute"] == "torch"
    assert data["settings"]["parameters"] == model.PARAMETERS
    (run,) = data["runs"]
    assert run["verified"] is True
    assert {"steps_per_s", "images_per_s", "step_ms", "scaling_efficiency", "steps"} <= set(run)
    assert {"mean", "ci95"} <= set(run["steps_per_s"])
    assert {"seconds", "compute", "communication"} <= set(run["step_ms"])
    assert run["step_ms"]["compute"] > 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_command_runs_without_compute(tmp_path):
    out = tmp_path / "a.json"
    code = alexnet.main(["--compute", "none", "--workers", "1", "--steps", "1", "--warmup", "0",
                         "--protocols", "grpc+verbs", "--json", str(out)])
    assert code == 0
    assert json.loads(out.read_text())["settings"]["compute"] == "none"
