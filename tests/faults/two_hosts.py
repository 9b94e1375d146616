"""Two "hosts" for the faults suite: the ps in a network namespace joined by a veth pair,
the worker in this process, and the nftables faults on the link between them."""
from __future__ import annotations

import contextlib
import itertools
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

import tensorverbs as tv
from tensorverbs.local_cluster import COMMAND_TIMEOUT, TaskProcess, free_port
from tensorverbs.verbs.config import RdmaConfig

from tensorverbs.netns import namespace
from nft import Faults
from training import worker_step
from variants import VARIANTS


@dataclass
class Hosts:
    """The ps (in the namespace), the worker (here) and the faults between them."""

    ps: TaskProcess
    worker: tv.Server
    faults: Faults
    steps: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def train(self, steps: int, timeout: float = 60.0) -> None:
        """Run ``steps`` training steps (new step ids); every byte is checked and any
        error fails the caller."""
        for _ in range(steps):
            step = next(self.steps)
            self.ps.post("run", "training:ps_step", step, timeout)
            try:
                worker_step(self.worker, step, timeout)
            finally:  # the ps's half is collected whatever the worker's did
                assert self.ps.result(timeout + COMMAND_TIMEOUT)


@contextlib.contextmanager
def two_hosts(variant: str) -> Iterator[Hosts]:
    """The hosts running ``variant``; the link healed, the tasks stopped and the namespace
    removed afterwards."""
    protocol, env = VARIANTS[variant]
    with contextlib.ExitStack() as stack:
        ns = stack.enter_context(namespace())
        cluster = {"ps": [f"{ns.inner_ip}:{free_port()}"],  # any port: the namespace is empty
                   "worker": [f"{ns.host_ip}:{free_port(ns.host_ip)}"]}
        ps = TaskProcess(cluster, "ps", 0, protocol, env, netns=ns.name)
        stack.callback(ps.stop)
        worker = tv.Server(cluster, "worker", 0, protocol, config=RdmaConfig.from_env(env))
        stack.callback(worker.stop)
        faults = Faults(ns)
        stack.callback(faults.heal)  # first: the tasks stop over a healthy link
        yield Hosts(ps, worker, faults)


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``condition`` until it holds; AssertionError naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:g} s")
        time.sleep(0.01)
