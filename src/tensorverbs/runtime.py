"""What one task owns and the parts of it share: its identity, local table, counters, recv
metrics, loop, deadlines, lanes, peers and shared tensors. What only one part uses (the
protocol's options) goes to that part, not here."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .cluster import ClusterSpec, TaskName
from .rendezvous.deadlines import Deadlines
from .rendezvous.local import LocalTable
from .stats import Counters

if TYPE_CHECKING:
    from .ipc.shared_tensors import SharedTensors
    from .metrics.recvs import RecvMetrics
    from .rendezvous.lanes import Lanes
    from .rendezvous.relay import Relays
    from .rpc.loop import EventLoopThread
    from .rpc.peers import Peers


@dataclass
class TaskRuntime:
    """One task's shared state, handed to the protocol it runs and its gRPC service."""

    cluster: ClusterSpec
    task: TaskName
    incarnation: int
    protocol: str
    table: LocalTable
    counters: Counters
    loop: "EventLoopThread"
    deadlines: Deadlines
    peers: "Peers"
    recvs: "RecvMetrics"
    #: where device copies and callers' callbacks of recvs run, a lane per peer
    lanes: "Lanes"
    #: this task's tensors passed by handle
    shared: "SharedTensors"
    #: the relay broadcasts this task sends and follows (set once its sends can be made)
    relays: "Relays" = None  # type: ignore[assignment]

    @property
    def host(self) -> str:
        """This task's host, as the cluster spec writes it."""
        return host_of(self.cluster.address(self.task))


def host_of(address: str) -> str:
    """The host of ``host:port`` (an IPv6 address without its brackets)."""
    return address.rsplit(":", 1)[0].strip("[]")
