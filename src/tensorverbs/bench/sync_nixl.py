"""NIXL's READ as the contender of ``bench sync``'s one-sided reads.

The trainer's agent registers the parameters once (a region each); each receiver's agent
registers its copy of the weights and READs every tensor in one transfer (a descriptor
per tensor), polling it to completion. NIXL's progress thread is off, as in ``bench
transfer``: the trainer polls for the receivers' notifications while they read (without
RDMA hardware UCX carries a READ as messages the owner answers), and every side yields
the CPU between polls.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .contenders import nixl

#: what the trainer hands each receiver: its agent's metadata and the parameters' regions
Offer = tuple[bytes, list[tuple[int, int, int]]]


class NixlOwner:
    """The trainer's agent, the parameters registered with it."""

    def __init__(self, params: Sequence[np.ndarray]) -> None:
        self.agent = nixl.agent("trainer")
        self.regions = [nixl.region(p) for p in params]
        self._registered = self.agent.register_memory([(*r, "") for r in self.regions], "DRAM")

    def offer(self) -> Offer:
        return self.agent.get_agent_metadata(), self.regions

    def serve(self, readers: int, timeout: float) -> None:
        """Make progress until ``readers`` READs have notified their end."""
        nixl.await_notifications(self.agent, readers, timeout)

    def close(self) -> None:
        self.agent.deregister_memory(self._registered)


class NixlReader:
    """A receiver's agent: its weights registered, the trainer's agent known."""

    def __init__(self, name: str, weights: Sequence[np.ndarray], offer: Offer) -> None:
        metadata, regions = offer
        self.agent = nixl.agent(name)
        local = [nixl.region(w) for w in weights]
        self._registered = self.agent.register_memory([(*r, "") for r in local], "DRAM")
        self.peer = self.agent.add_remote_agent(metadata)
        self.local = self.agent.get_xfer_descs(local, "DRAM")
        self.remote = self.agent.get_xfer_descs(regions, "DRAM")

    def read(self, step: int, timeout: float) -> None:
        """READ every tensor into the weights, in one transfer."""
        handle = self.agent.initialize_xfer("READ", self.local, self.remote, self.peer, str(step).encode())
        nixl.run_transfer(self.agent, handle, f"round {step}", timeout)

    def close(self) -> None:
        self.agent.remove_remote_agent(self.peer)
        self.agent.deregister_memory(self._registered)
