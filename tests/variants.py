"""Protocol variants the suites run over, and a two-task cluster to run them on."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import tensorverbs as tv
from tensorverbs.local_cluster import TaskProcess, cluster_spec
from tensorverbs.verbs import availability
from tensorverbs.verbs.config import RdmaConfig

#: variant -> (protocol, environment of every task)
VARIANTS: dict[str, tuple[str, dict[str, str]]] = {
    "grpc": ("grpc", {}),
    "verbs": ("grpc+verbs", {"TENSORVERBS_PROVIDER": "soft"}),
    "verbs-tcp": ("grpc+verbs", {"TENSORVERBS_PROVIDER": "soft", "TENSORVERBS_SAME_HOST": "no"}),
    "verbs-read": ("grpc+verbs", {"TENSORVERBS_PROVIDER": "soft", "TENSORVERBS_RENDEZVOUS": "read"}),
}

#: where the ibverbs provider finds a device (the soft-RoCE lane), the suites run over it too,
#: as "ibverbs" (write mode; read mode runs there in the core's pair tests). The lane's guest
#: emulates its CPUs, so its transport gets a longer retransmission timeout (1 s, not 67 ms).
IBVERBS, IBVERBS_WHY = availability("ibverbs")
if IBVERBS:
    VARIANTS["ibverbs"] = ("grpc+verbs", {"TENSORVERBS_PROVIDER": "ibverbs", "RDMA_QP_TIMEOUT": "18"})


@dataclass
class Pair:
    ps: TaskProcess           # /job:ps/task:0, in a child process
    worker: tv.Server         # /job:worker/task:0, in the test process
    protocol: str
    env: dict[str, str]
    cluster: dict

    PS = "/job:ps/replica:0/task:0"
    WORKER = "/job:worker/replica:0/task:0"


def start_pair(protocol: str, env: dict[str, str], **server_kwargs) -> Pair:
    cluster = cluster_spec({"ps": 1, "worker": 1})
    ps = TaskProcess(cluster, "ps", 0, protocol, env, **server_kwargs)
    try:
        worker = tv.Server(cluster, "worker", 0, protocol, config=RdmaConfig.from_env(env),
                           **server_kwargs)
    except BaseException:
        ps.stop()
        raise
    return Pair(ps, worker, protocol, env, cluster)


def pair_of(variant: str) -> Iterator[Pair]:
    """A module fixture's pair on ``variant``: yielded, then stopped."""
    protocol, env = VARIANTS[variant]
    p = start_pair(protocol, env)
    yield p
    p.worker.stop()
    p.ps.stop()

#: the variants of suites about the Python surface (results, asyncio, batches): each
#: protocol and provider, the soft provider on one host and across hosts (TCP); read mode
#: differs only below that surface, and the data-path suites run it
SURFACE_VARIANTS = [name for name in VARIANTS if name != "verbs-read"]
