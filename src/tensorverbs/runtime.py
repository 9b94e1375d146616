"""What the parts of one task share: its identity, local table, counters, recv metrics,
loop, lanes and peers."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .cluster import ClusterSpec, TaskName
from .rendezvous.deadlines import Deadlines
from .rendezvous.local import LocalTable
from .stats import Counters

if TYPE_CHECKING:
    from .ipc.shared_tensors import SharedTensors
    from .metrics.recvs import RecvMetrics
    from .rendezvous.lanes import Lanes
    from .rpc.loop import EventLoopThread
    from .rpc.peers import Peers
    from .verbs.config import RdmaConfig


@dataclass
class TaskRuntime:
    """One task's shared state, handed to the protocol it runs."""

    cluster: ClusterSpec
    task: TaskName
    incarnation: int
    protocol: str
    table: LocalTable
    counters: Counters
    loop: "EventLoopThread"
    deadlines: Deadlines
    peers: "Peers"
    rdma_config: "RdmaConfig"
    startup_grace: float
    recvs: "RecvMetrics"
    #: where device copies and callers' callbacks of recvs run, a lane per peer
    lanes: "Lanes"
    #: how many tasks may join at run time beyond the cluster's (grpc+verbs sizes its core for them)
    spare_tasks: int = 0
    #: this task's tensors passed by handle (set once the runtime exists)
    shared: "SharedTensors" = field(init=False)
    #: where the task listens (host:port), when not at its address in the cluster
    bind: str | None = None

    @property
    def host(self) -> str:
        """This task's host, as the cluster spec writes it."""
        return _host(self.cluster.address(self.task))

    @property
    def bind_host(self) -> str:
        """The host the task listens on, "" when it is :attr:`host`."""
        return _host(self.bind) if self.bind else ""


def _host(address: str) -> str:
    """The host of ``host:port`` (an IPv6 address without its brackets)."""
    return address.rsplit(":", 1)[0].strip("[]")
