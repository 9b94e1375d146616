"""What every cluster resolver shares: the interface, environment variables read with
errors that name them, and jobs laid over ranks."""
from __future__ import annotations

import abc
import os
from typing import Callable, Mapping, Sequence, TypeVar

from .. import arguments as check
from ..cluster import ClusterSpec
from ..errors import InvalidArgumentError

T = TypeVar("T")


class ClusterResolver(abc.ABC):
    """The cluster of a job a launcher started, and which of its tasks this process is
    (``task_type``, ``task_id``), as TensorFlow's cluster resolvers tell it; ``token``, the
    job token of the server :meth:`tensorverbs.Server.from_resolver` starts (None: the
    server's default, TENSORVERBS_TOKEN or TENSORVERBS_TOKEN_FILE)."""

    def __init__(self, task_type: str, task_id: int, token: str | None = None) -> None:
        self.task_type = task_type
        self.task_id = task_id
        self.token = check.optional_text(token, "token")

    @abc.abstractmethod
    def cluster_spec(self) -> ClusterSpec:
        """Every task of the job and its address."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(task_type={self.task_type!r}, task_id={self.task_id})"


def environment(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    """``environ``, or the process's environment where it is None (InvalidArgumentError if
    it is not a mapping)."""
    given = check.environ(environ)
    return os.environ if given is None else given


def read_var(environ: Mapping[str, str], *names: str, parse: Callable[[str], T], hint: str) -> T:
    """The first of ``names`` set in ``environ``, parsed; InvalidArgumentError naming the
    variable(s) when none is set (followed by ``hint``) or the value does not parse."""
    for name in names:
        value = environ.get(name)
        if value:
            try:
                return parse(value)
            except ValueError as exc:
                raise InvalidArgumentError(f"{name}={value!r} is malformed: {exc}") from None
    raise InvalidArgumentError(f"{' or '.join(names)} is not set ({hint})")


def natural(text: str) -> int:
    """``text`` as an integer >= 0; ValueError otherwise."""
    if not text.strip().isdigit():
        raise ValueError("expected an integer >= 0")
    return int(text)


def jobs_by_rank(jobs: Mapping[str, int] | None, size: int, source: str) -> dict[str, range]:
    """The ranks of each job: jobs take consecutive ranks in the order given (``{"worker":
    size}`` where ``jobs`` is None); InvalidArgumentError unless they add up to ``size``,
    the number of tasks ``source`` says the launcher started."""
    jobs = {"worker": size} if jobs is None else dict(jobs)
    if not jobs or any(not isinstance(n, int) or n < 1 for n in jobs.values()):
        raise InvalidArgumentError(f"jobs {jobs} must give each job a task count >= 1")
    if sum(jobs.values()) != size:
        raise InvalidArgumentError(
            f"jobs {jobs} need {sum(jobs.values())} tasks but {source} says {size} were started")
    ranks, start = {}, 0
    for job, count in jobs.items():
        ranks[job] = range(start, start + count)
        start += count
    return ranks


def task_of_rank(ranks: Mapping[str, range], rank: int) -> tuple[str, int]:
    """(job, task index) of the task with ``rank``."""
    for job, span in ranks.items():
        if rank in span:
            return job, rank - span.start
    raise InvalidArgumentError(f"rank {rank} is not below the job's {sum(map(len, ranks.values()))} tasks")


def cluster_of_ranks(ranks: Mapping[str, range], addresses: Sequence[str]) -> ClusterSpec:
    """The cluster whose task of rank ``r`` is at ``addresses[r]``."""
    return ClusterSpec({job: [addresses[r] for r in span] for job, span in ranks.items()})
