"""The processes of ``tensorverbs bench alexnet``: the parameter server and the workers,
each running its step loop on a :class:`tensorverbs.Server` (see :mod:`.alexnet`)."""
from __future__ import annotations

import os
import time
import zlib
from typing import Any

import numpy as np

from ..child_process import report as report_progress
from .model import IMAGE_SIZE, PARAMETER_SHAPES

PS = "/job:ps/replica:0/task:0"
TIMEOUT = 600.0
LEARNING_RATE = 0.01


def worker_name(index: int) -> str:
    """The task name of worker ``index``."""
    return f"/job:worker/replica:0/task:{index}"


def _threads(workers: int) -> int:
    return max(1, (os.cpu_count() or 1) // workers)


def checksum(arrays: list[np.ndarray]) -> int:
    """CRC-32 of the arrays' bytes, one after the other."""
    crc = 0
    for array in arrays:
        crc = zlib.crc32(memoryview(np.ascontiguousarray(array)).cast("B"), crc)
    return crc


def join_steps(ps: list[dict], workers: list[list[dict]], verify: bool) -> list[dict]:
    """Each step's record: the ps's joined with the workers' (``workers[w][i]``: worker w's
    record of the i-th step)."""
    steps = []
    for i, record in enumerate(ps):
        each = [w[i] for w in workers]
        compute = max(r["compute"] for r in each) + record["update"]
        if verify:  # what each side sent is what the other received
            record["verified"] = all(
                w["received"] == record["sent"] and w["sent"] == got
                for w, got in zip(each, record["received"]))
        steps.append({**record, "compute": compute,
                      "communication": max(0.0, record["seconds"] - compute), "workers": each})
    return steps


class _Task:
    """What the ps and the workers share: the server, the tensors' names and the step
    loop's bookkeeping. ``cluster`` is the cluster spec, or the task's server where a
    launcher started it (``tensorverbs.ray.run_cluster``). ``shapes`` (default AlexNet's) are
    the tensors moved without ``compute``; ``verify`` adds each step's CRC-32 of what went
    each way to its record."""

    def __init__(self, cluster: Any, job: str, index: int, protocol: str, compute: bool,
                 workers: int, shapes: list | None, verify: bool) -> None:
        from ..server import Server
        from ..verbs import RdmaConfig

        self.server = cluster if isinstance(cluster, Server) else Server(
            cluster, job, index, protocol, config=RdmaConfig.from_env())
        self.compute, self.workers, self.verify = compute, workers, verify
        self.shapes = [(name, tuple(shape)) for name, shape in (shapes or PARAMETER_SHAPES)]
        if compute:
            import torch

            torch.set_num_threads(_threads(workers))
            torch.manual_seed(0)

    def registered(self, array: np.ndarray) -> np.ndarray:
        """A copy of ``array`` in the memory the protocol sends from and receives into
        directly (``Server.allocate``: registered memory with grpc+verbs)."""
        placed = self.server.allocate(array.shape, array.dtype)
        placed[...] = array
        return placed

    def register_parameters(self, params: list[Any]) -> None:
        """Move each torch parameter's data into :meth:`registered` memory."""
        import torch

        for param in params:
            param.data = torch.from_numpy(self.registered(param.detach().numpy()))

    def recv_all(self, prefix: str, source: str, step: int, outs: list[Any] | None = None) -> list[Any]:
        """Every tensor of the step from ``source`` (each into its ``outs`` if given)."""
        outs = outs or [None] * len(self.shapes)
        futures = [self.server.recv_async(prefix + name, source, step, TIMEOUT, out=out)
                   for (name, _), out in zip(self.shapes, outs)]
        return [f.result() for f in futures]

    def send_all(self, prefix: str, arrays: list[np.ndarray], to: str, step: int) -> None:
        for (name, _), array in zip(self.shapes, arrays):
            self.server.send(prefix + name, array, to, step)

    def close(self) -> None:
        self.server.stop()


class ParameterServer(_Task):
    """Holds the weights; each step publishes them and applies the workers' gradients."""

    def __init__(self, cluster: dict, protocol: str, compute: bool, workers: int,
                 shapes: list | None = None, verify: bool = False) -> None:
        super().__init__(cluster, "ps", 0, protocol, compute, workers, shapes, verify)
        if compute:
            from .model import alexnet

            params = list(alexnet().parameters())
            self.register_parameters(params)
            self.params = [p.detach() for p in params]
            self.weights = [p.numpy() for p in self.params]
        else:
            rng = np.random.default_rng(0)
            self.weights = [self.registered(rng.standard_normal(shape, dtype=np.float32))
                            for _, shape in self.shapes]

    def run(self, first: int, count: int) -> list[dict]:
        """Steps ``first``.. ``first + count - 1``; per step its seconds, and of those the
        wait for gradients and the update."""
        records = []
        for step in range(first, first + count):
            start = time.perf_counter()
            for w in range(self.workers):
                self.send_all("w/", self.weights, worker_name(w), step)
            grads = [self.recv_all("g/", worker_name(w), step) for w in range(self.workers)]
            received = time.perf_counter()
            record = {"step": step}
            if self.verify:  # before the update changes the weights
                record.update(sent=checksum(self.weights), received=[checksum(g) for g in grads])
            if self.compute:
                self._apply(grads)
            del grads  # received buffers go back to the pool
            self.server.cleanup_step(step)
            end = time.perf_counter()
            records.append({**record, "seconds": end - start, "update": end - received})
            report_progress(step)
        return records

    def _apply(self, grads: list[list[np.ndarray]]) -> None:
        import torch

        scale = -LEARNING_RATE / self.workers
        with torch.no_grad():
            for i, param in enumerate(self.params):
                for worker_grads in grads:
                    param.add_(torch.from_numpy(worker_grads[i]), alpha=scale)


class Worker(_Task):
    """Each step: receive the weights (straight into the model's parameters, which live
    in registered memory, as do their gradients), compute gradients on a random batch,
    send them."""

    def __init__(self, cluster: dict, index: int, protocol: str, compute: bool, workers: int,
                 batch: int, shapes: list | None = None, verify: bool = False) -> None:
        super().__init__(cluster, "worker", index, protocol, compute, workers, shapes, verify)
        self.name = worker_name(index)
        if compute:
            import torch

            from .model import CLASSES, alexnet

            self.model = alexnet()
            self.params = list(self.model.parameters())
            self.register_parameters(self.params)
            for param in self.params:  # the gradients are sent from registered memory too
                param.grad = torch.from_numpy(self.registered(np.zeros(tuple(param.shape), np.float32)))
            self.weights = self.params  # each step's weights are received into them
            self.views = [p.detach().numpy() for p in self.params]
            self.images = torch.randn(batch, 3, IMAGE_SIZE, IMAGE_SIZE)
            self.labels = torch.randint(0, CLASSES, (batch,))
        else:
            rng = np.random.default_rng(1 + index)
            self.grads = [self.registered(rng.standard_normal(shape, dtype=np.float32))
                          for _, shape in self.shapes]
            self.weights = self.views = [self.server.allocate(shape, np.float32) for _, shape in self.shapes]

    def run(self, first: int, count: int) -> list[dict]:
        """Steps ``first``.. ``first + count - 1``; per step the seconds spent receiving
        the weights, computing and sending."""
        records = []
        for step in range(first, first + count):
            start = time.perf_counter()
            self.recv_all("w/", PS, step, self.weights)
            received = time.perf_counter()
            record = {"step": step, "received": checksum(self.views)} if self.verify else {"step": step}
            grads = self._gradients() if self.compute else self.grads
            computed = time.perf_counter()
            self.send_all("g/", grads, PS, step)
            self.server.cleanup_step(step - 1)  # the ps took that step's gradients
            sent = time.perf_counter()
            if self.verify:
                record["sent"] = checksum(grads)
            records.append({**record, "recv": received - start, "compute": computed - received,
                            "send": sent - computed})
        return records

    def _gradients(self) -> list[np.ndarray]:
        import torch.nn.functional as F

        self.model.zero_grad(set_to_none=False)  # the gradient buffers are reused
        F.cross_entropy(self.model(self.images), self.labels).backward()
        return [p.grad.numpy() for p in self.params]
