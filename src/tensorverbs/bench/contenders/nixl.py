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

from .base import Payloads, Sink as BaseSink, Source as BaseSource, pages

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

    def offer_blocks(self, nbytes: int, count: int) -> tuple[bytes, tuple[int, int, int], int]:
        """This agent's metadata, the region of ``count`` payloads as the rows of one
        buffer, and the size of a row."""
        payload = self.payloads.get(nbytes)
        if self.registered.array is None or self.registered.array.shape != (count, nbytes // 4):
            blocks = np.empty((count, nbytes // 4), np.float32)
            blocks[:] = payload
            self.registered.hold(blocks)
        return self.agent.get_agent_metadata(), region(self.registered.array), nbytes

    def serve_blocks(self, nbytes: int, count: int, step: int) -> None:
        await_notifications(self.agent, 1, TIMEOUT)  # one transfer of them all

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
        self.blocks = np.empty((0, 0), np.uint8)  # the paged buffer blocks land in (fetch_blocks)
        self.blocks_registered = Registration(self.agent)
        self.prepped: tuple[Any, Any] | None = None  # both sides' prepared descriptor lists

    def accept(self, offer: tuple) -> None:
        """The source's metadata and its payload's region, or (blocks) its rows' region and
        the size of a row."""
        if offer != self.offered:
            if self.peer is not None:
                self.agent.remove_remote_agent(self.peer)
            metadata, region = offer[:2]
            self.peer = self.agent.add_remote_agent(metadata)
            self.remote = self.agent.get_xfer_descs([region], "DRAM") if len(offer) == 2 else None
            self.offered, self.prepped = offer, None

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

    def fetch_blocks(self, nbytes: int, count: int, step: int) -> np.ndarray:
        """NIXL's prepared transfer of the blocks: both sides' descriptor lists prepared
        once (``prep_xfer_dlist``, untimed after the first round), then one READ of every
        block into its row of a registered buffer (``make_prepped_xfer``), polled to its end."""
        if self.prepped is None or self.blocks.shape != (count, nbytes):
            self.blocks = np.ones((count, nbytes), np.uint8)
            self.blocks_registered.hold(self.blocks)
            _, (address, _, _), row = self.offered
            rows = [(self.blocks.ctypes.data + i * nbytes, nbytes, 0) for i in range(count)]
            theirs = [(address + i * row, row, 0) for i in range(count)]
            self.prepped = (self.agent.prep_xfer_dlist("NIXL_INIT_AGENT", rows, "DRAM"),
                            self.agent.prep_xfer_dlist(self.peer, theirs, "DRAM"))
        local, remote = self.prepped
        handle = self.agent.make_prepped_xfer("READ", local, pages(count).astype(np.int32), remote,
                                              np.arange(count, dtype=np.int32), str(step).encode())
        run_transfer(self.agent, handle, f"{count} blocks at step {step}", TIMEOUT)
        return self.blocks

    def close(self) -> None:
        if self.peer is not None:
            self.agent.remove_remote_agent(self.peer)
        self.registered.release()
        self.blocks_registered.release()
