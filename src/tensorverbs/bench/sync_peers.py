"""The processes of ``bench sync`` (:mod:`.sync`): the trainer, which holds the parameters
and offers them each way, and a receiver, which takes them and checks their bytes; each a
:class:`~.peer.Peer` of its own."""
from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from ..server import Server
from .sync_gloo import GlooMember
from .sync_nixl import NixlOwner, NixlReader, Offer

TRAINER = "/job:trainer/task:0"
#: seconds a round may take, and a peer to come up
TIMEOUT = 300.0


def value(shape: tuple[int, ...], i: int) -> np.ndarray:
    """Tensor ``i`` of the parameters: its values tell it apart."""
    return np.full(shape, float(i % 1000) + 0.5, np.float32)


class _SyncTask:
    """What the trainer and a receiver share: a server, and NIXL's agent and gloo's group
    once a way uses them, closed with the task."""

    server: Server
    nixl: NixlOwner | NixlReader | None = None
    gloo: GlooMember | None = None

    def cleanup(self, step: int) -> None:
        self.server.cleanup_step(step)

    def close(self) -> None:
        if self.nixl is not None:
            self.nixl.close()
        if self.gloo is not None:
            self.gloo.close()
        self.server.stop()


class SyncTrainer(_SyncTask):
    """The trainer, in its own process: it holds the parameters and offers them."""

    def __init__(self, cluster: dict[str, list[str]], protocol: str, shapes: list[tuple[int, ...]]) -> None:
        self.server = Server(cluster, "trainer", 0, protocol, startup_grace=TIMEOUT)
        self.params = [self.server.allocate(shape, np.float32, one_sided=True) for shape in shapes]
        for i, param in enumerate(self.params):
            param[...] = value(param.shape, i)
        self.receivers = [f"/job:infer/task:{i}" for i in range(len(cluster["infer"]))]

    def gloo_join(self, init_method: str) -> None:
        """Join the gloo group of every task, as its rank 0."""
        self.gloo = GlooMember(init_method, 0, 1 + len(self.receivers), self.params)

    def gloo_round(self) -> tuple[float, float]:
        assert self.gloo is not None
        return self.gloo.round()

    def nixl_offer(self) -> Offer:
        """The parameters registered with a NIXL agent, for the receivers' agents."""
        self.nixl = self.nixl or NixlOwner(self.params)
        return self.nixl.offer()

    def nixl_serve(self) -> None:
        """Make NIXL progress until every receiver's READ of a round has ended."""
        assert self.nixl is not None
        self.nixl.serve(len(self.receivers), TIMEOUT)

    def buffers(self) -> list[Any]:
        """The parameters' RemoteBuffers (registered once)."""
        return [self.server.register(p, writable=False) for p in self.params]

    def round(self, step: int, way: str) -> float:
        """Offer every tensor to every receiver ``way``; seconds until all have them. A
        "late relay" goes to all receivers but the last and serves late receivers (the step
        is not cleaned up: :meth:`cleanup` does)."""
        start = time.perf_counter()
        if way == "late relay":
            handles = [self.server.send(f"p{i}", p, to=self.receivers[:-1], step_id=step, relay=True, late=True)
                       for i, p in enumerate(self.params)]
            for handle in handles:
                handle.wait(TIMEOUT)
            return time.perf_counter() - start
        if way in ("broadcast", "relay"):
            handles = [self.server.send(f"p{i}", p, to=self.receivers, step_id=step, relay=way == "relay")
                       for i, p in enumerate(self.params)]
        else:
            handles = [self.server.send(f"p{i}", p, to=r, step_id=step)
                       for i, p in enumerate(self.params) for r in self.receivers]
        for handle in handles:
            handle.wait(TIMEOUT)
        seconds = time.perf_counter() - start
        self.server.cleanup_step(step)
        return seconds

    def relay_round_failing(self, step: int) -> tuple[float, list[str]]:
        """A relay round some receiver dies in: seconds until every handle settled, and the
        errors of those that failed."""
        start = time.perf_counter()
        handles = [self.server.send(f"p{i}", p, to=self.receivers, step_id=step, relay=True)
                   for i, p in enumerate(self.params)]
        errors = [str(error) for handle in handles if (error := handle.exception(TIMEOUT)) is not None]
        return time.perf_counter() - start, errors

    def registrations(self) -> int:
        return self.server.stats().get("source_registrations", 0)

    def bytes_sent(self) -> int:
        return self.server.stats()["bytes_sent"]



class SyncReceiver(_SyncTask):
    """A receiver (an inference process), in its own process."""

    def __init__(self, cluster: dict[str, list[str]], index: int, protocol: str,
                 shapes: list[tuple[int, ...]]) -> None:
        self.server = Server(cluster, "infer", index, protocol, startup_grace=TIMEOUT)
        self.index = index
        self.shapes = shapes
        self.futures: list[Any] = []
        self.weights = [np.zeros(shape, np.float32) for shape in shapes]  # what reads fill
        self.remote: list[Any] = []
        self.receivers = len(cluster["infer"])

    def gloo_join(self, init_method: str) -> None:
        """Join the gloo group of every task (as rank 1 + this receiver's index)."""
        self.gloo = GlooMember(init_method, 1 + self.index, 1 + self.receivers, self.weights)

    def gloo_round(self) -> tuple[float, float]:
        """Take part in a round of gloo broadcasts into the weights; (start, end), checked."""
        assert self.gloo is not None
        start, end = self.gloo.round()
        return start, self._checked(end)

    def ask(self, step: int) -> int:
        """Start a recv of every tensor of ``step``."""
        self.futures = [self.server.recv_async(f"p{i}", TRAINER, step, TIMEOUT) for i in range(len(self.shapes))]
        return len(self.futures)

    def late_join(self, step: int) -> float:
        """Receive every tensor of ``step``, which was relayed to the others: seconds until
        all came (the first, middle and last checked)."""
        start = time.perf_counter()
        self.ask(step)
        self.check()
        return time.perf_counter() - start

    def ask_then_die(self, step: int) -> None:
        """Receive the first tensor of ``step`` (passing it on), then end this process at once,
        unstopped, as a receiver that dies mid-sync."""
        self.server.recv("p0", TRAINER, step, TIMEOUT)
        os._exit(0)

    def check(self) -> int:
        """Wait for every tensor; check the first, middle and last."""
        got = [fut.result(TIMEOUT) for fut in self.futures]
        for i in (0, len(got) // 2, len(got) - 1):
            if not np.array_equal(got[i], value(self.shapes[i], i)):
                raise AssertionError(f"{self.server.task}: wrong bytes in tensor p{i}")
        self.futures = []
        return len(got)

    def take(self, buffers: list[Any]) -> None:
        """The trainer's parameters' RemoteBuffers."""
        self.remote = buffers

    def nixl_take(self, offer: Offer) -> None:
        """The trainer's NIXL agent and parameters."""
        self.nixl = NixlReader(f"infer{self.index}", self.weights, offer)

    def read(self) -> tuple[float, float]:
        """Read every tensor into the weights in one call; (start, end) on the host's
        monotonic clock. Checks the first, middle and last."""
        start = time.perf_counter()
        self.server.read_many(list(zip(self.remote, self.weights)), timeout=TIMEOUT)
        return start, self._checked(time.perf_counter())

    def nixl_read(self, step: int) -> tuple[float, float]:
        """:meth:`read` by NIXL's READ."""
        assert self.nixl is not None
        start = time.perf_counter()
        self.nixl.read(step, TIMEOUT)
        return start, self._checked(time.perf_counter())

    def _checked(self, end: float) -> float:
        """``end``, once the first, middle and last weights hold the parameters' values
        (then zeroed, so that the next round must read them again)."""
        for i in sorted({0, len(self.weights) // 2, len(self.weights) - 1}):  # (each once: zeroed)
            if not np.array_equal(self.weights[i], value(self.shapes[i], i)):
                raise AssertionError(f"{self.server.task}: wrong bytes read in tensor p{i}")
            self.weights[i][...] = 0
        return end

