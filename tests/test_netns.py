"""Tensors between a task in a network namespace (another "host") and one outside it."""
from __future__ import annotations

import numpy as np
import pytest

import tensorverbs as tv
from tensorverbs.verbs.config import RdmaConfig

from variants import VARIANTS
from tensorverbs.local_cluster import TaskProcess, free_port, pattern
from tensorverbs.netns import namespace, unavailable_reason

pytestmark = pytest.mark.netns
_REASON = unavailable_reason()


@pytest.mark.skipif(_REASON is not None, reason=_REASON or "")
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_tensors_cross_a_network_namespace(variant):
    protocol, env = VARIANTS[variant]
    with namespace() as ns:
        cluster = {"ps": [f"{ns.inner_ip}:23456"], "worker": [f"{ns.host_ip}:{free_port(ns.host_ip)}"]}
        ps = TaskProcess(cluster, "ps", 0, protocol, env, netns=ns.name)
        try:
            with tv.Server(cluster, "worker", 0, protocol, config=RdmaConfig.from_env(env)) as worker:
                for step, nbytes in enumerate([0, 1, 4096, 3 << 20]):
                    ps.send_pattern("p", "/job:worker/task:0", step, nbytes, seed=step)
                    out = worker.recv("p", source="/job:ps/task:0", step_id=step, timeout=60)
                    assert np.array_equal(out, pattern(nbytes, step))
                    worker.send("q", pattern(nbytes, step + 7), to="/job:ps/task:0", step_id=step)
                    assert ps.recv_pattern("q", "/job:worker/task:0", step, nbytes, step + 7, timeout=60)
                strings = np.array([b"across", b"namespaces"], dtype=object)
                worker.send("s", strings, to="/job:ps/task:0", step_id=99)
                assert ps.recv("s", "/job:worker/task:0", 99, timeout=60).tolist() == strings.tolist()
        finally:
            ps.stop()
