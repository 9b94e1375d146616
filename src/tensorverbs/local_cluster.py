"""A local cluster: each task in its own process, driven over a pipe.

A :class:`TaskProcess` is a :class:`~tensorverbs.child_process.ChildProcess` (a fresh
Python, optionally in a network namespace, with its environment) that starts a
:class:`tensorverbs.Server` and then runs the commands its parent sends: any Server
method, the helpers below, and ``run("module:function", ...)``, which calls
``function(server, ...)`` there. Large tensors are made on both sides from a seed
(:func:`pattern`) instead of crossing the pipe. The demo, the benchmarks and the tests
drive their clusters with it.
"""
from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from .child_process import ChildProcess, load
from .errors import UnavailableError
from .ports import free_port
from .tensor import raw_bytes

#: how long the parent waits for a child's answer before giving up on it (seconds)
COMMAND_TIMEOUT = 120.0


def cluster_spec(jobs: dict[str, int], host: str = "127.0.0.1") -> dict[str, list[str]]:
    """A cluster of ``{job: task count}`` on free ports of ``host``, a different one for
    each task (a port is only checked free, not held, so two picks could agree)."""
    ports: list[int] = []
    for _ in range(sum(jobs.values())):
        ports.append(free_port(host, ports))
    it = iter(ports)
    return {job: [f"{host}:{next(it)}" for _ in range(n)] for job, n in jobs.items()}


_PATTERN_BLOCK = (1 << 20) + 3


def pattern(nbytes: int, seed: int, dtype: Any = np.uint8) -> np.ndarray:
    """About ``nbytes`` of deterministic data of ``dtype``, the same in every process
    (``dtype="string"``: an object array of bytes strings of that total length)."""
    if dtype == "string":
        items = [b"%d:%d|" % (seed, i) for i in range(max(1, nbytes // 12))]
        return np.array(items, dtype=object)
    block = np.arange(min(nbytes, _PATTERN_BLOCK) + 1, dtype=np.uint64)
    block *= 2654435761
    block += seed
    block >>= 7
    # repeat an odd-sized block, so that neighbouring megabytes differ too
    return np.resize(block.astype(np.uint8), nbytes).view(dtype)


def same(a: np.ndarray, b: np.ndarray) -> bool:
    """Same dtype, shape and bytes (NaN payloads included)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype == object:
        return bool(np.array_equal(a, b))
    return bool(np.array_equal(raw_bytes(np.ascontiguousarray(a)), raw_bytes(np.ascontiguousarray(b))))


class _Task:
    """In a task's process: its Server and the commands the parent may send beside the
    Server's methods."""

    def __init__(self, cluster, job: str, index: int, protocol: str, kwargs: dict) -> None:
        import tensorverbs as tv

        self._send_handle = tv.SendHandle
        self.server = tv.Server(cluster, job, index, protocol, **kwargs)

    def __getattr__(self, method: str) -> Callable[..., Any]:
        if method == "server" or method.startswith("_"):  # not built (yet)
            raise AttributeError(method)
        fn = getattr(self.server, method)

        def call(*args: Any, **kwargs: Any) -> Any:
            result = fn(*args, **kwargs)
            # a send's handle stays in this process (the parent may call flush)
            return None if isinstance(result, self._send_handle) else result
        return call

    def send_pattern(self, name, to, step_id, nbytes, seed, dtype="uint8") -> None:
        self.server.send(name, pattern(nbytes, seed, dtype), to, step_id)

    def recv_pattern(self, name, source, step_id, nbytes, seed, dtype="uint8", timeout=None) -> bool:
        out = self.server.recv(name, source, step_id, timeout)
        return same(out, pattern(nbytes, seed, dtype))

    def timed_recv(self, name, source, step_id, nbytes, seed, dtype="uint8",
                   timeout=None) -> tuple[float, bool]:
        """(seconds the recv took, whether the bytes match the pattern)"""
        start = time.perf_counter()
        out = self.server.recv(name, source, step_id, timeout)
        seconds = time.perf_counter() - start
        return seconds, same(out, pattern(nbytes, seed, dtype))

    def send_steps(self, name, to, first_step, steps, nbytes) -> None:
        for s in range(first_step, first_step + steps):
            self.server.send(name, pattern(nbytes, s), to, s)

    def wait_waiters(self, n: int, timeout: float = 60.0) -> None:
        """Block until ``n`` recvs wait in the server's local table (a condition, polled)."""
        deadline = time.monotonic() + timeout
        while self.server.pending()[1] < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"fewer than {n} recvs waited after {timeout} s")
            time.sleep(0.005)

    def task(self) -> str:
        return self.server.task

    def run(self, function: str, *args: Any, **kwargs: Any) -> Any:
        """``function`` ("module:function") called with the server and the arguments."""
        return load(function)(self.server, *args, **kwargs)

    def stop(self) -> None:
        self.server.stop()


class TaskProcess(ChildProcess):
    """One task of a cluster in a child process."""

    last_method = "stop"
    timeout = COMMAND_TIMEOUT

    def __init__(self, cluster: dict, job: str, index: int, protocol: str = "grpc",
                 env: dict[str, str] | None = None, netns: str | None = None, wait: bool = True,
                 **server_kwargs: Any) -> None:
        super().__init__(f"/job:{job}/replica:0/task:{index}", _Task, cluster, job, index, protocol,
                         server_kwargs, env=env, netns=netns, wait=wait, process_name=f"task-{job}-{index}")

    def exited(self) -> BaseException:
        return UnavailableError(f"the process of {self.name} exited (code {self.process.exitcode})")

    def __getattr__(self, method: str):
        if method.startswith("_"):
            raise AttributeError(method)
        return lambda *args, **kwargs: self.call(method, *args, **kwargs)

    def close(self) -> None:
        """Release the pipe and the process handle of a task whose process has ended."""
        self._conn.close()
        self.process.close()

    def stop(self) -> None:
        """Stop the task's server and its process (killing it if it does not stop)."""
        if self.process.is_alive():
            try:
                self.call("stop", timeout=30)
            except (UnavailableError, BrokenPipeError, TimeoutError, ConnectionResetError):
                pass
            self.process.join(10)
        if self.process.is_alive():
            self.kill()
