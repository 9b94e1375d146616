"""A trainer (in the test's process) and its receivers (each in a process of its own), for
the tests of sends to many tasks."""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator

import tensorverbs as tv
from tensorverbs.local_cluster import TaskProcess, cluster_spec
from tensorverbs.verbs.config import RdmaConfig
from variants import VARIANTS

TRAINER = "/job:trainer/replica:0/task:0"
#: how long a condition is waited for, or a held lane held
WAIT = 60.0


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


def until(condition: Callable[[], object], what: str, seconds: float = WAIT) -> None:
    """Return once ``condition()`` holds (polled); fail saying ``what`` after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


def hold_lane(server: tv.Server, peer: str, step: int) -> tuple[threading.Event, threading.Event]:
    """Start a recv of "hold" from ``peer`` whose done-callback, once ``peer`` sends it,
    holds the lane of ``peer`` (where tensorverbs' own callbacks of recvs from it run too):
    (set once the lane is held, to set to free it)."""
    held, free = threading.Event(), threading.Event()
    hold = server.recv_async("hold", peer, step, WAIT)
    hold.add_done_callback(lambda _: (held.set(), free.wait(WAIT)))  # (pending: it runs on the lane)
    return held, free
