"""``bench alexnet --launcher ray`` on tiny tensors and few steps: the ps and the workers,
Ray actors, deliver every tensor with both protocols."""
from __future__ import annotations

import pytest

pytest.importorskip("ray", reason="the Ray integration needs ray (pip install 'tensorverbs[ray]')")

from tensorverbs.bench import alexnet  # noqa: E402
from tensorverbs.bench.contenders import by_name  # noqa: E402

TINY = [("conv", (4, 3)), ("fc", (16,))]


def test_both_protocols_deliver_every_tensor_on_ray(ray_cluster):
    runs = alexnet.train(by_name(["grpc", "grpc+verbs"]), [2], steps=3, warmup=1, rounds=2, batch=1,
                         compute=False, shapes=TINY, verify=True, launcher="ray")
    assert [(r["protocol"], r["workers"]) for r in runs] == [("grpc", 2), ("grpc+verbs", 2)]
    for r in runs:
        assert r["verified"] is True
        assert [s["step"] for s in r["steps"]] == [0, 1, 2, 3]
        assert all(len(s["workers"]) == 2 for s in r["steps"])
