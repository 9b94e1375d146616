"""A trainer (in the test's process) and its receivers (each in a process of its own), for
the tests of sends to many tasks."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import tensorverbs as tv
from tensorverbs.local_cluster import TaskProcess, cluster_spec
from tensorverbs.verbs.config import RdmaConfig
from variants import VARIANTS

TRAINER = "/job:trainer/replica:0/task:0"


def receiver_names(count: int) -> list[str]:
    return [f"/job:worker/replica:0/task:{i}" for i in range(count)]


@contextmanager
def trainer_and_receivers(variant: str, count: int) -> Iterator[tuple[tv.Server, list[TaskProcess]]]:
    """(the trainer, its ``count`` receivers) on ``variant``, stopped as the block ends."""
    protocol, env = VARIANTS[variant]
    spec = cluster_spec({"trainer": 1, "worker": count})
    receivers = [TaskProcess(spec, "worker", i, protocol, env) for i in range(count)]
    try:
        with tv.Server(spec, "trainer", 0, protocol, config=RdmaConfig.from_env(env)) as trainer:
            yield trainer, receivers
    finally:
        for receiver in receivers:
            receiver.stop()
