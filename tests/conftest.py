"""Shared fixtures: protocol variants and a two-task cluster (a child-process ps and an
in-process worker) per variant."""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, settings

import tensorverbs as tv
from tensorverbs.verbs.config import RdmaConfig

from tensorverbs.local_cluster import TaskProcess, cluster_spec

#: variant -> (protocol, environment of every task)
VARIANTS: dict[str, tuple[str, dict[str, str]]] = {
    "grpc": ("grpc", {}),
    "verbs": ("grpc+verbs", {"TENSORVERBS_PROVIDER": "soft"}),
    "verbs-tcp": ("grpc+verbs", {"TENSORVERBS_PROVIDER": "soft", "TENSORVERBS_SAME_HOST": "no"}),
    "verbs-read": ("grpc+verbs", {"TENSORVERBS_PROVIDER": "soft", "TENSORVERBS_RENDEZVOUS": "read"}),
}

# the machines that run the tests are small and busy: never fail a property test on speed
settings.register_profile("tensorverbs", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("tensorverbs")

_steps = itertools.count(1000)


@pytest.fixture
def step() -> int:
    """A step id no other test uses."""
    return next(_steps)


@dataclass
class Pair:
    ps: TaskProcess           # /job:ps/task:0, in a child process
    worker: tv.Server         # /job:worker/task:0, in the test process
    protocol: str
    env: dict[str, str]
    cluster: dict

    PS = "/job:ps/replica:0/task:0"
    WORKER = "/job:worker/replica:0/task:0"


def start_pair(protocol: str, env: dict[str, str], **server_kwargs) -> Pair:
    cluster = cluster_spec({"ps": 1, "worker": 1})
    ps = TaskProcess(cluster, "ps", 0, protocol, env, **server_kwargs)
    try:
        worker = tv.Server(cluster, "worker", 0, protocol, config=RdmaConfig.from_env(env),
                           **server_kwargs)
    except BaseException:
        ps.stop()
        raise
    return Pair(ps, worker, protocol, env, cluster)


@pytest.fixture(scope="module", params=list(VARIANTS))
def variant(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def pair(variant):
    protocol, env = VARIANTS[variant]
    p = start_pair(protocol, env)
    yield p
    p.worker.stop()
    p.ps.stop()
