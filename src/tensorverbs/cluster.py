"""ClusterSpec and task names.

A cluster maps job names to task addresses, as TensorFlow's ``tf.train.ClusterSpec``
does. Task names take the long form ``/job:ps/replica:0/task:0`` or the short form
``/job:ps/task:0``; :func:`parse_task` accepts both and :class:`TaskName` prints the long.
"""
from __future__ import annotations

import functools
import json
import os
import re
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence, Union

from . import arguments as check
from .errors import InvalidArgumentError

_TASK = re.compile(
    r"^/job:(?P<job>[A-Za-z0-9_\-]+)(?:/replica:(?P<replica>\d+))?/task:(?P<task>\d+)"
    r"(?:/device:(?P<device>[A-Za-z_]+:\d+))?$")


@dataclass(frozen=True, order=True)
class TaskName:
    """One task of a cluster: job name, replica and task index."""

    job: str
    task: int
    replica: int = 0

    def __str__(self) -> str:
        try:
            text: str = self.__dict__["_text"]  # written once: recvs name their peer by it
            return text
        except KeyError:
            text = self.__dict__["_text"] = f"/job:{self.job}/replica:{self.replica}/task:{self.task}"
            return text

    @property
    def device(self) -> str:
        """The task's CPU device, as rendezvous keys name it."""
        return f"{self}/device:CPU:0"


#: the longest task name taken: names from peers reach the cache of parsed names, whose
#: 4096 entries must stay small
MAX_TASK_NAME = 1024


def parse_task(name: Union[str, TaskName]) -> TaskName:
    """Parse ``/job:J[/replica:R]/task:T[/device:D:N]`` of at most :data:`MAX_TASK_NAME`
    characters; raise InvalidArgumentError otherwise."""
    if isinstance(name, TaskName):
        return name
    text = name if isinstance(name, str) else repr(name)
    if len(text) > MAX_TASK_NAME:
        raise InvalidArgumentError(f"malformed task name {text[:64]!r}...: {len(text)} characters, "
                                   f"longer than {MAX_TASK_NAME}")
    return _parse_task(text)


@functools.lru_cache(maxsize=4096)
def _parse_task(name: str) -> TaskName:
    m = _TASK.match(name.strip())
    if not m:
        raise InvalidArgumentError(
            f"malformed task name {name!r}: expected /job:<name>/task:<index> "
            "or /job:<name>/replica:<r>/task:<index>")
    return TaskName(m["job"], int(m["task"]), int(m["replica"] or 0))


JobSpec = Union[Sequence[str], Mapping[int, str]]


def _task_table(job: str, tasks: JobSpec) -> dict[int, str]:
    """``{task index: address}`` of a job given as a list or as a mapping whose keys are
    task indices (ints, or strings of them as in TF_CONFIG's JSON), sorted by index."""
    if not isinstance(tasks, Mapping):
        if not isinstance(tasks, Sequence) or isinstance(tasks, str):
            raise InvalidArgumentError(
                f"tasks of job {job!r} are {tasks!r}: expected a list of host:port "
                "or a mapping of task index to host:port")
        return dict(enumerate(tasks))
    try:
        table = {int(index): address for index, address in tasks.items()}
    except (TypeError, ValueError):
        raise InvalidArgumentError(
            f"task indices of job {job!r} are {list(tasks)}: expected integers") from None
    return dict(sorted(table.items()))


def tf_config_entry(key: str, environ: Mapping[str, str] | None = None) -> Any:
    """Entry ``key`` ("cluster", "task") of the TF_CONFIG environment variable (JSON);
    InvalidArgumentError naming TF_CONFIG when it is unset, not JSON or has no ``key``."""
    given = check.environ(environ)
    text = (os.environ if given is None else given).get("TF_CONFIG")
    if not text:
        raise InvalidArgumentError("TF_CONFIG is not set")
    try:
        return json.loads(text)[key]
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidArgumentError(f"TF_CONFIG has no valid {key!r}: {exc}") from None


def _check_job(job: Any) -> None:
    if not re.fullmatch(r"[A-Za-z0-9_\-]+", str(job)):
        raise InvalidArgumentError(f"malformed job name {job!r}")


def check_address(address: Any, what: str) -> str:
    """``address``, a ``host:port`` with a port in [0, 65535] (0 picks a free one);
    InvalidArgumentError naming ``what`` otherwise."""
    found = re.fullmatch(r".+:(\d+)", address) if isinstance(address, str) else None
    if found is None:
        raise InvalidArgumentError(f"{what} is {address!r}: expected host:port")
    if int(found[1]) > 65535:
        raise InvalidArgumentError(
            f"{what} is {address!r}: port {found[1]} is not in [0, 65535] (0 picks a free port)")
    return found[0]


def _check_distinct(jobs: dict[str, dict[int, str]]) -> None:
    """InvalidArgumentError naming two tasks of ``jobs`` at one address (port 0 aside: each
    task there is given a free port as it starts)."""
    seen: dict[str, tuple[TaskName, str]] = {}
    for job, table in jobs.items():
        for index, address in table.items():
            host, port = address.rsplit(":", 1)
            if int(port) == 0:
                continue
            task = TaskName(job, index)
            other, theirs = seen.setdefault(f"{host.lower()}:{int(port)}", (task, address))
            if other != task:
                raise InvalidArgumentError(
                    f"{other} at {theirs} and {task} at {address} share an address: each task "
                    "needs one of its own")


class ClusterSpec:
    """Jobs and the addresses (``host:port``) of their tasks. :meth:`add_task` adds a task
    that joins a running cluster (or moves one), :meth:`remove_task` forgets one.

    A port is in [0, 65535], port 0 picking a free one as the task starts. Two tasks at one
    address (spelt alike, the host's case aside) are InvalidArgumentError, port 0 aside; a
    task that joins may take the address of a task gone from the job (:meth:`add_task`
    does not refuse it), and a copy of a spec keeps it."""

    def __init__(self, jobs: "ClusterSpec | Mapping[str, Any]") -> None:
        self._jobs: dict[str, dict[int, str]]
        if isinstance(jobs, ClusterSpec):  # checked as it was made and grown
            self._jobs = {job: dict(table) for job, table in jobs._jobs.items()}
            return
        if not isinstance(jobs, Mapping) or not jobs:
            raise InvalidArgumentError("a cluster needs at least one job: {job: [host:port, ...]}")
        self._jobs = {}
        for job, tasks in jobs.items():
            _check_job(job)
            table = _task_table(job, tasks)
            for index, address in table.items():
                check_address(address, f"address of {TaskName(str(job), index)}")
            self._jobs[str(job)] = table
        _check_distinct(self._jobs)

    @classmethod
    def from_tf_config(cls, environ: Mapping[str, str] | None = None) -> "ClusterSpec":
        """The ``cluster`` of the TF_CONFIG environment variable (JSON), as TensorFlow reads it."""
        return cls(tf_config_entry("cluster", environ))

    @property
    def jobs(self) -> list[str]:
        return list(self._jobs)

    def as_dict(self) -> dict[str, list[str] | dict[int, str]]:
        """The spec as TensorFlow prints it: lists where task indices are dense."""
        out: dict[str, list[str] | dict[int, str]] = {}
        for job, table in self._jobs.items():
            dense = list(table) == list(range(len(table)))
            out[job] = list(table.values()) if dense else dict(table)
        return out

    def tasks(self) -> Iterator[TaskName]:
        for job, table in list(self._jobs.items()):  # copies: a task may join meanwhile
            for index in list(table):
                yield TaskName(job, index)

    def add_task(self, job: str, index: int, address: str, *, replace: bool = False) -> bool:
        """Add task ``index`` of ``job`` (a new job or an existing one) at ``address``;
        False if it is here already at that address. A task here at another address is
        InvalidArgumentError, unless ``replace``: then it moves to ``address`` (True)."""
        _check_job(job)
        task = TaskName(str(job), check.integer(index, "index"))
        if task.task < 0:
            raise InvalidArgumentError(f"task index of {task} is negative")
        check_address(address, f"address of {task}")
        known = self._jobs.get(task.job, {}).get(task.task)
        if known is not None and known != address and not check.flag(replace, "replace"):
            raise InvalidArgumentError(f"{task} is at {known} already, not at {address}")
        if known != address:
            table = {**self._jobs.get(task.job, {}), task.task: address}
            self._jobs[task.job] = dict(sorted(table.items()))
        return known != address

    def remove_task(self, name: Union[str, TaskName]) -> None:
        """Forget a task (InvalidArgumentError if it is not here); a job left without
        tasks goes too."""
        task = self.resolve(name)
        table = {index: address for index, address in self._jobs[task.job].items() if index != task.task}
        if table:
            self._jobs[task.job] = table
        else:
            del self._jobs[task.job]

    def __contains__(self, task: object) -> bool:
        """Whether ``task`` (a TaskName) is in the cluster."""
        return (isinstance(task, TaskName) and task.replica == 0
                and task.task in self._jobs.get(task.job, {}))

    def resolve(self, name: Union[str, TaskName]) -> TaskName:
        """The task called ``name``; InvalidArgumentError naming it if it is not in the cluster."""
        task = parse_task(name)
        if task.replica != 0 or task.task not in self._jobs.get(task.job, {}):
            raise InvalidArgumentError(
                f"task {name} is not in the cluster (it has {', '.join(map(str, self.tasks()))})")
        return task

    def address(self, name: Union[str, TaskName]) -> str:
        """``host:port`` of a task."""
        task = self.resolve(name)
        return self._jobs[task.job][task.task]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ClusterSpec) and self._jobs == other._jobs

    def __repr__(self) -> str:
        return f"ClusterSpec({self.as_dict()!r})"
