"""SlurmClusterResolver: the cluster of a Slurm job step, from Slurm's environment."""
from __future__ import annotations

import itertools
import re
from typing import Mapping

from ..cluster import ClusterSpec
from ..errors import InvalidArgumentError
from .base import (
    ClusterResolver, cluster_of_ranks, environment, jobs_by_rank, natural, read_var, task_of_rank,
)

_HINT = "not started by Slurm's srun or sbatch?"
# a hostlist group: names with bracketed ranges, e.g. node[1-2,5] or rack[1-2]-gpu[01-04]
_GROUP = r"(?:[^,\[\]]|\[\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*\])+"
_REPEAT = re.compile(r"(\d+)(?:\(x(\d+)\))?")


def expand_hostlist(hostlist: str) -> list[str]:
    """The host names of a Slurm hostlist, in its order: ``"n[1-2],m5,o[08-10]"`` gives
    n1, n2, m5, o08, o09, o10 (a range keeps the zero padding of its first number; a name
    with several ranges gives every combination, the last range varying fastest).
    ValueError for anything else."""
    if not re.fullmatch(f"{_GROUP}(?:,{_GROUP})*", hostlist):
        raise ValueError("expected a Slurm hostlist such as node[1-2,5],login1")
    hosts: list[str] = []
    for group in re.findall(_GROUP, hostlist):
        parts = re.split(r"\[([^\]]*)\]", group)  # text, range, text, ..., text
        choices = [_expand_range(part) if i % 2 else [part] for i, part in enumerate(parts)]
        hosts.extend("".join(name) for name in itertools.product(*choices))
    return hosts


def _expand_range(text: str) -> list[str]:
    """``"01-03,7"`` -> ["01", "02", "03", "7"]."""
    out: list[str] = []
    for item in text.split(","):
        first, _, last = item.partition("-")
        if int(last or first) < int(first):
            raise ValueError(f"range {item} runs backwards")
        out.extend(f"{i:0{len(first)}d}" for i in range(int(first), int(last or first) + 1))
    return out


def expand_tasks_per_node(tasks_per_node: str) -> list[int]:
    """Tasks on each node, from Slurm's compressed form: ``"2(x3),1"`` gives [2, 2, 2, 1].
    ValueError for anything else."""
    counts: list[int] = []
    for item in tasks_per_node.split(","):
        m = _REPEAT.fullmatch(item.strip())
        if not m:
            raise ValueError(f"{item!r} is not N or N(xR)")
        counts.extend([int(m[1])] * int(m[2] or 1))
    return counts


class SlurmClusterResolver(ClusterResolver):
    """The tasks of the Slurm job step this process is one of, as TensorFlow's resolver of
    that name lays them out.

    The step's nodes (SLURM_STEP_NODELIST, else SLURM_JOB_NODELIST) run the numbers of
    tasks SLURM_STEP_TASKS_PER_NODE (else SLURM_TASKS_PER_NODE) gives, and process ids
    (SLURM_PROCID) are dealt out node by node, as Slurm's default block distribution
    does: the first node's count of ids to the first node, and so on. A node's tasks
    listen on ``port_base``, ``port_base + 1``, ... The jobs take consecutive process ids
    in the order ``jobs`` gives them (default: one "worker" per task); their task counts
    must add up to the step's.

    Unlike TensorFlow's resolver, nodes keep the hostlist's order (TensorFlow sorts their
    names as strings, which puts node10 before node9 and so gives a task another node's
    address) and jobs keep the order given (TensorFlow sorts them by name: the same order
    for ``{"ps": 1, "worker": N}``). GPUs are not assigned. ``token`` is the job token of
    the server this task starts (default: the server's, TENSORVERBS_TOKEN or
    TENSORVERBS_TOKEN_FILE; without one it serves anyone).
    """

    def __init__(self, jobs: Mapping[str, int] | None = None, port_base: int = 8888, *,
                 environ: Mapping[str, str] | None = None, token: str | None = None) -> None:
        env = environment(environ)
        rank = read_var(env, "SLURM_PROCID", parse=natural, hint=_HINT)
        hosts = read_var(env, "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", parse=expand_hostlist,
                         hint=_HINT)
        counts = read_var(env, "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE",
                          parse=expand_tasks_per_node, hint=_HINT)
        if len(hosts) != len(counts):
            raise InvalidArgumentError(
                f"Slurm names {len(hosts)} nodes ({', '.join(hosts)}) but gives tasks per node for "
                f"{len(counts)} ({counts})")
        addresses = [f"{host}:{port_base + local}" for host, count in zip(hosts, counts)
                     for local in range(count)]
        ranks = jobs_by_rank(jobs, len(addresses), "Slurm's tasks per node")
        self._cluster = cluster_of_ranks(ranks, addresses)
        super().__init__(*task_of_rank(ranks, rank), token)

    def cluster_spec(self) -> ClusterSpec:
        """The step's tasks at ``host:port_base + local index``."""
        return self._cluster
