"""TorchrunClusterResolver: the cluster of a job torchrun started, each task's address
published through torch.distributed's TCPStore."""
from __future__ import annotations

import datetime
import socket
from typing import Any, Mapping

from ..cluster import ClusterSpec
from ..errors import DeadlineExceededError, FailedPreconditionError, UnavailableError
from ..ports import free_port, host_port
from .base import (
    ClusterResolver, cluster_of_ranks, environment, jobs_by_rank, natural, read_var, task_of_rank,
)

_HINT = "not started by torchrun (python -m torch.distributed.run)?"


class TorchrunClusterResolver(ClusterResolver):
    """The tasks of a job torchrun (or anything setting its variables) started.

    RANK and WORLD_SIZE say which task this is and how many there are; the jobs take
    consecutive ranks in the order ``jobs`` gives them (default: one "worker" per rank),
    and their task counts must add up to WORLD_SIZE. Every task picks a free port on
    ``host`` (default: this host's address on the route to MASTER_ADDR) and publishes it
    in torch.distributed's TCPStore at MASTER_ADDR:MASTER_PORT, which torchrun's agent
    hosts, or else rank 0 (as ``init_process_group`` does); then it reads everyone's.

    Args:
        jobs: ``{job: task count}``.
        host: the name or address the other tasks reach this one at.
        timeout: seconds to wait for the store, and for the other tasks' addresses.
        environ: the environment to read (default: the process's).
        token: the job token of the server this task starts (default: as the server's,
            TENSORVERBS_TOKEN or TENSORVERBS_TOKEN_FILE; without one it serves anyone).
    """

    def __init__(self, jobs: Mapping[str, int] | None = None, *, host: str | None = None,
                 timeout: float = 300.0, environ: Mapping[str, str] | None = None,
                 token: str | None = None) -> None:
        env = environment(environ)
        rank = read_var(env, "RANK", parse=natural, hint=_HINT)
        size = read_var(env, "WORLD_SIZE", parse=natural, hint=_HINT)
        self._master = (read_var(env, "MASTER_ADDR", parse=str.strip, hint=_HINT),
                        read_var(env, "MASTER_PORT", parse=natural, hint=_HINT))
        self._ranks = jobs_by_rank(jobs, size, "WORLD_SIZE")
        self._rank, self._size = rank, size
        self._host = host
        self._timeout = datetime.timedelta(seconds=timeout)
        # a group torchrun restarted must not read the addresses of the one before
        self._prefix = f"tensorverbs/{env.get('TORCHELASTIC_RESTART_COUNT', '0')}"
        self._cluster: ClusterSpec | None = None
        super().__init__(*task_of_rank(self._ranks, rank), token)

    def cluster_spec(self) -> ClusterSpec:
        """Every task's address. The first call publishes this task's and waits for the
        others' (every task must call it): UnavailableError if the store is not up with
        every rank within the timeout, DeadlineExceededError naming the ranks that did not
        publish their addresses within it."""
        if self._cluster is None:
            self._cluster = cluster_of_ranks(self._ranks, self._exchange())
        return self._cluster

    def _exchange(self) -> list[str]:
        """Publish this task's address and read every task's, by rank."""
        try:
            import torch.distributed as dist
        except ImportError as exc:
            raise FailedPreconditionError(f"TorchrunClusterResolver needs torch: {exc}") from None
        master = host_port(*self._master)
        host = self._host or _route_address(*self._master)
        where = f"torch.distributed's store at {master} (MASTER_ADDR, MASTER_PORT)"
        try:
            store, _, _ = next(dist.rendezvous(f"tcp://{master}", self._rank, self._size,
                                               timeout=self._timeout))
        except (RuntimeError, ValueError) as exc:
            raise UnavailableError(
                f"{where} was not up with all {self._size} ranks within "
                f"{self._timeout.total_seconds():g} s: {exc}") from None
        store = dist.PrefixStore(self._prefix, store)
        store.set(f"address/{self._rank}", host_port(host, free_port(host)))
        self._wait(store, "address", f"publish an address in {where}")
        addresses = [store.get(f"address/{r}").decode() for r in range(self._size)]
        store.set(f"read/{self._rank}", "")
        if self._rank == 0:  # the store may be this process's: it stays until all have read
            self._wait(store, "read", f"read the addresses from {where}")
        return addresses

    def _wait(self, store: Any, kind: str, what: str) -> None:
        """Wait until every rank has set key ``kind/<rank>``."""
        keys = [f"{kind}/{r}" for r in range(self._size)]
        try:
            store.wait(keys, self._timeout)
        except RuntimeError:
            missing = [str(r) for r, key in enumerate(keys) if not store.check([key])]
            raise DeadlineExceededError(
                f"rank(s) {', '.join(missing)} of {self._size} did not {what} within "
                f"{self._timeout.total_seconds():g} s") from None


def _route_address(host: str, port: int) -> str:
    """This host's address on the route to ``host`` (connecting a UDP socket sends nothing)."""
    try:
        family, kind, _, _, sockaddr = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, kind) as s:
            s.connect(sockaddr)
            return str(s.getsockname()[0])
    except OSError as exc:
        raise UnavailableError(f"no route to MASTER_ADDR {host}: {exc}") from None

