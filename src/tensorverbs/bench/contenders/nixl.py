"""NIXL (NVIDIA's inference transfer library) over UCX on CPU memory: the sink READs the
tensor from the source's registered payload into a registered buffer of its own, one
``initialize_xfer`` per transfer (the descriptor lists are made once per size), and polls
the request to completion. NIXL's progress thread is off, so no NIXL thread spins while
other contenders run; instead the source makes progress by polling for the notification
that ends each READ while the sink fetches (without RDMA hardware UCX carries a READ as
messages the source must answer). Both sides yield the CPU between polls, so that on a
busy machine the other side can run. The source's metadata, which carries its payload's
registration, reaches the sink over the benchmark's pipes before each round.

Optional: ``pip install --no-deps nixl-cu12`` (or the ``nixl`` meta package). NIXL 1.5.1
crashes the process at exit once an agent was made; that happens after ``close`` and
costs nothing here.
"""
from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import time
from typing import Any

import numpy as np

from .base import Payloads, Sink as BaseSink, Source as BaseSource

#: the meta package, then the wheels of its CUDA variants (each runs on CPU memory too)
MODULES = ("nixl", "nixl_cu12", "nixl_cu13")
BACKEND = "UCX"
TIMEOUT = 120.0  # seconds a READ, or a round of them, may take


def _module() -> str | None:
    return next((name for name in MODULES if importlib.util.find_spec(name) is not None), None)


def available() -> tuple[bool, str]:
    """Whether a NIXL Python package is installed, and which."""
    name = _module()
    if name is None:
        return False, "nixl is not installed (pip install --no-deps nixl-cu12)"
    importlib.import_module(f"{name}._api")
    version = importlib.metadata.version(name.replace("_", "-"))
    return True, f"{name} {version}, {BACKEND} READ, progress thread off"


def link() -> dict:
    """Nothing to set up beforehand: the metadata goes with each round."""
    return {}


def agent(name: str) -> Any:
    """A NIXL agent with the UCX backend and no progress thread."""
    api = importlib.import_module(f"{_module()}._api")
    made = api.nixl_agent(name, api.nixl_agent_config(enable_prog_thread=False,
                                                       backends=[BACKEND]))
    if BACKEND not in made.backends:
        raise RuntimeError(f"NIXL has no {BACKEND} backend here (plugins: "
                           f"{', '.join(made.get_plugin_list()) or 'none'})")
    return made


def region(array: np.ndarray) -> tuple[int, int, int]:
    """(address, length, device) of ``array`` in host memory."""
    return array.ctypes.data, array.nbytes, 0


def await_notifications(agent: Any, count: int, timeout: float) -> None:
    """Make progress (yielding the CPU between polls) until ``count`` transfers have
    notified ``agent`` of their end."""
    got, deadline = 0, time.monotonic() + timeout
    while got < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{count - got} of {count} READs did not end in {timeout:g} s")
        got += sum(map(len, agent.get_new_notifs().values()))
        os.sched_yield()


def run_transfer(agent: Any, handle: Any, what: str, timeout: float) -> None:
    """Start ``handle`` and poll it (yielding the CPU) until it ends; RuntimeError unless
    it is done within ``timeout``."""
    state, deadline = agent.transfer(handle), time.monotonic() + timeout
    while state == "PROC" and time.monotonic() < deadline:
        os.sched_yield()
        state = agent.check_xfer_state(handle)
    handle.release()
    if state != "DONE":
        raise RuntimeError(f"the NIXL READ of {what} ended {state}")


class Registration:
    """One array registered with an agent at a time (it stays alive while registered)."""

    def __init__(self, agent: Any) -> None:
        self.agent = agent
        self.array: np.ndarray | None = None
        self._descs = None

    def hold(self, array: np.ndarray) -> None:
        """Register ``array`` instead of the one held before."""
        if array is not self.array:
            self.release()
            self._descs = self.agent.register_memory([(*region(array), "")], "DRAM")
            self.array = array

    def release(self) -> None:
        """Deregister the array held, if any."""
        if self._descs is not None:
            self.agent.deregister_memory(self._descs)
        self._descs = self.array = None


class Source(BaseSource):
    """The serving agent: offers its payload, then makes progress until the sink's READs
    of the round have all notified it."""

    passive = False

    def __init__(self, link: dict) -> None:
        self.agent = agent("source")
        self.payloads = Payloads()
        self.registered = Registration(self.agent)

    def offer(self, nbytes: int) -> tuple[bytes, tuple[int, int, int]]:
        """This agent's metadata and the payload's region."""
        self.registered.hold(self.payloads.get(nbytes))
        return self.agent.get_agent_metadata(), region(self.registered.array)

    def serve(self, nbytes: int, count: int, step: int) -> None:
        await_notifications(self.agent, count, TIMEOUT)

    def close(self) -> None:
        self.registered.release()


class Sink(BaseSink):
    """The reading agent: one READ per transfer into its registered buffer."""

    def __init__(self, link: dict) -> None:
        super().__init__()
        self.agent = agent("sink")
        self.buffer = np.empty(0, np.uint8)
        self.registered = Registration(self.agent)
        self.offered: Any = None
        self.peer = self.local = self.remote = None

    def accept(self, offer: tuple[bytes, tuple[int, int, int]]) -> None:
        if offer != self.offered:
            metadata, region = offer
            self.peer = self.agent.add_remote_agent(metadata)
            self.remote = self.agent.get_xfer_descs([region], "DRAM")
            self.offered = offer

    def prepare(self, nbytes: int) -> None:
        if self.buffer.nbytes != nbytes:
            self.buffer = np.ones(nbytes, np.uint8)  # written, so mapped before the timing
            self.registered.hold(self.buffer)
            self.local = self.agent.get_xfer_descs([region(self.buffer)], "DRAM")

    def fetch_one(self, nbytes: int, step: int) -> np.ndarray:
        handle = self.agent.initialize_xfer("READ", self.local, self.remote, self.peer,
                                            str(step).encode())
        run_transfer(self.agent, handle, f"step {step}", TIMEOUT)
        return self.buffer

    def close(self) -> None:
        if self.peer is not None:
            self.agent.remove_remote_agent(self.peer)
        self.registered.release()
