"""A local cluster: each task in its own process, driven over a pipe.

A :class:`TaskProcess` starts a fresh Python (multiprocessing "spawn"), optionally
moves it into a network namespace, applies environment variables, starts a
:class:`tensorverbs.Server` and then runs the commands its parent sends: any Server
method, the helpers below, and ``run("module:function", ...)``, which calls
``function(server, ...)`` there. Large tensors are made on both sides from a seed
(:func:`pattern`) instead of crossing the pipe. The demo, the benchmarks and the tests
drive their clusters with it.
"""
from __future__ import annotations

import ctypes
import importlib
import multiprocessing as mp
import os
import signal
import time
import traceback
from typing import Any, Callable

import numpy as np

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


class _Raised:
    def __init__(self, error: BaseException) -> None:
        self.error = error
        self.trace = traceback.format_exc()


def _load(path: str) -> Any:
    """The function named by ``"module:function"``."""
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


def _enter_netns(name: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
    if libc.setns(fd, 0x40000000) != 0:  # CLONE_NEWNET
        raise OSError(ctypes.get_errno(), f"setns({name}) failed")
    os.close(fd)


def _wait_waiters(server, n: int, timeout: float) -> None:
    """Block until ``n`` recvs wait in the server's local table (a condition, polled)."""
    deadline = time.monotonic() + timeout
    while server.pending()[1] < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"fewer than {n} recvs waited after {timeout} s")
        time.sleep(0.005)


def _task_main(conn, cluster, job: str, index: int, protocol: str, env: dict, netns: str | None,
               kwargs: dict) -> None:
    if netns:
        _enter_netns(netns)
    os.environ.update(env)
    import tensorverbs as tv

    try:
        server = tv.Server(cluster, job, index, protocol, **kwargs)
    except BaseException as exc:
        conn.send(_Raised(exc))
        return
    conn.send("ready")

    def recv_pattern(name, source, step_id, nbytes, seed, dtype="uint8", timeout=None):
        out = server.recv(name, source, step_id, timeout)
        return same(out, pattern(nbytes, seed, dtype))

    def timed_recv(name, source, step_id, nbytes, seed, dtype="uint8", timeout=None):
        """(seconds the recv took, whether the bytes match the pattern)"""
        start = time.perf_counter()
        out = server.recv(name, source, step_id, timeout)
        seconds = time.perf_counter() - start
        return seconds, same(out, pattern(nbytes, seed, dtype))

    commands: dict[str, Callable[..., Any]] = {
        "send_pattern": lambda name, to, step_id, nbytes, seed, dtype="uint8":
            server.send(name, pattern(nbytes, seed, dtype), to, step_id),
        "recv_pattern": recv_pattern,
        "timed_recv": timed_recv,
        "send_steps": lambda name, to, first_step, steps, nbytes:
            [server.send(name, pattern(nbytes, s), to, s) for s in range(first_step, first_step + steps)] and None,
        "stats": server.stats,
        "wait_waiters": lambda n, timeout=60.0: _wait_waiters(server, n, timeout),
        "task": lambda: server.task,
        "run": lambda function, *args, **kw: _load(function)(server, *args, **kw),
    }
    while True:
        try:
            method, args, kw = conn.recv()
        except EOFError:
            break
        if method == "stop":
            server.stop()
            conn.send(None)
            break
        try:
            fn = commands.get(method) or getattr(server, method)
            result = fn(*args, **kw)
            # a send's handle stays in this process (the parent may call flush)
            conn.send(None if isinstance(result, tv.SendHandle) else result)
        except BaseException as exc:  # sent back and raised in the test
            conn.send(_Raised(exc))


class TaskProcess:
    """One task of a cluster in a child process."""

    def __init__(self, cluster: dict, job: str, index: int, protocol: str = "grpc",
                 env: dict[str, str] | None = None, netns: str | None = None, wait: bool = True,
                 **server_kwargs: Any) -> None:
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self.name = f"/job:{job}/replica:0/task:{index}"
        self.process = ctx.Process(
            target=_task_main, name=f"task-{job}-{index}", daemon=True,
            args=(child, cluster, job, index, protocol, dict(env or {}), netns, server_kwargs))
        self.process.start()
        child.close()
        self._up = False
        if wait:
            self.ready()

    def ready(self) -> None:
        """Wait until the child's server is up (raising its start-up error); returns at
        once when it was seen up already."""
        if not self._up:
            self._reply(COMMAND_TIMEOUT)
            self._up = True

    def _reply(self, timeout: float) -> Any:
        if not self._conn.poll(timeout):
            raise TimeoutError(f"{self.name} did not answer within {timeout} s")
        try:
            reply = self._conn.recv()
        except EOFError:
            self.process.join(5)
            raise UnavailableError(
                f"the process of {self.name} exited (code {self.process.exitcode})") from None
        if isinstance(reply, _Raised):
            raise reply.error
        return reply

    def call(self, method: str, *args: Any, timeout: float = COMMAND_TIMEOUT, **kwargs: Any) -> Any:
        """Run ``method`` in the child and return its result or raise its exception."""
        self.post(method, *args, **kwargs)
        return self.result(timeout)

    def post(self, method: str, *args: Any, **kwargs: Any) -> None:
        """Start ``method`` in the child without waiting; :meth:`result` collects it."""
        self._conn.send((method, args, kwargs))

    def result(self, timeout: float = COMMAND_TIMEOUT) -> Any:
        """The result of the oldest :meth:`post` not collected yet (after the server's
        start-up, which it waits for first)."""
        self.ready()
        return self._reply(timeout)

    def __getattr__(self, method: str):
        if method.startswith("_"):
            raise AttributeError(method)
        return lambda *args, **kwargs: self.call(method, *args, **kwargs)

    def kill(self) -> None:
        """SIGKILL: the task dies without a chance to clean up."""
        assert self.process.pid is not None  # started
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.join(10)

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
