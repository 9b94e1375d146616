"""Rendezvous keys in TensorFlow's format.

``src_device;src_incarnation;dst_device;tensor_name;frame_id:iter_id``, the incarnation
printed as 16 hex digits (TensorFlow's ``FpToString``), e.g.::

    /job:ps/replica:0/task:0/device:CPU:0;00000000075bcd15;/job:worker/replica:0/task:0/device:CPU:0;w1;0:0
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..arguments import instance, text as check_text
from ..cluster import ClusterSpec, TaskName, parse_task
from ..errors import InvalidArgumentError

#: the longest tensor name, in bytes of UTF-8
MAX_NAME_BYTES = 512
_NAME = re.compile(r"^[^;\x00]{1,512}$")
_FRAME_ITER = re.compile(r"^(\d+):(\d+)$")


def check_name(name: str) -> str:
    """A tensor name: 1-512 characters (UTF-8 bytes at most 512), no ';'."""
    try:
        if isinstance(name, str) and _NAME.match(name) and len(name.encode()) <= MAX_NAME_BYTES:
            return name
    except UnicodeEncodeError:
        pass
    raise InvalidArgumentError(f"invalid tensor name {name!r}: 1 to 512 bytes of UTF-8, without ';'")


@dataclass(frozen=True, slots=True)
class RendezvousKey:
    """A parsed rendezvous key. ``src_incarnation`` 0 means "whichever incarnation"."""

    src: TaskName
    src_incarnation: int
    dst: TaskName
    name: str
    frame_id: int = 0
    iter_id: int = 0

    def __str__(self) -> str:
        return format_key(self)

    def with_incarnation(self, incarnation: int) -> "RendezvousKey":
        return RendezvousKey(self.src, incarnation, self.dst, self.name, self.frame_id, self.iter_id)

    @property
    def matching(self) -> tuple[TaskName, TaskName, str, int, int]:
        """The part of the key that matches a send to a recv (all but the incarnation)."""
        return (self.src, self.dst, self.name, self.frame_id, self.iter_id)


def format_key(key: RendezvousKey) -> str:
    """The key as TensorFlow writes it."""
    key = instance(key, RendezvousKey, "key")
    return (f"{key.src.device};{key.src_incarnation:016x};{key.dst.device};{key.name};"
            f"{key.frame_id}:{key.iter_id}")


def parse_key(text: str) -> RendezvousKey:
    """Parse a key written by :func:`format_key` (or by TensorFlow)."""
    parts = check_text(text, "text").split(";")
    if len(parts) != 5:
        raise InvalidArgumentError(f"malformed rendezvous key {text!r}: expected 5 ';'-parts")
    src, incarnation, dst, name, frame_iter = parts
    m = _FRAME_ITER.match(frame_iter)
    try:
        inc = int(incarnation, 16)
    except ValueError:
        inc = -1
    if not m or not 0 <= inc < 1 << 64:
        raise InvalidArgumentError(f"malformed rendezvous key {text!r}")
    return RendezvousKey(parse_task(src), inc, parse_task(dst), check_name(name),
                         int(m.group(1)), int(m.group(2)))


class TaskKeys:
    """The keys of one task's sends and recvs, made once per (name, peer): a loop of
    recvs neither parses its source nor checks its name again. A peer that left the
    cluster is looked up anew (and refused so); at most :attr:`LIMIT` keys are kept."""

    LIMIT = 4096

    def __init__(self, cluster: ClusterSpec, task: TaskName, incarnation: int) -> None:
        self._cluster, self._task, self._incarnation = cluster, task, incarnation
        self._recvs: dict[tuple[str, str], tuple[RendezvousKey, bool]] = {}
        self._sends: dict[tuple[str, str], RendezvousKey] = {}

    def recv(self, name: str, source: str) -> tuple[RendezvousKey, bool]:
        """The key of a recv of ``name`` from ``source`` and whether it is a local recv;
        InvalidArgumentError for a bad name or a task not in the cluster."""
        try:
            hit = self._recvs.get((name, source))
        except TypeError:  # unhashable: the checks below name what is wrong
            hit = None
        if hit is not None and hit[0].src in self._cluster:
            return hit
        src = self._cluster.resolve(source)
        made = (RendezvousKey(src, 0, self._task, check_name(name)), src == self._task)
        self._keep(self._recvs, (name, source), made)
        return made

    def send(self, name: str, to: str) -> RendezvousKey:
        """The key of a send of ``name`` to ``to``; InvalidArgumentError as :meth:`recv`."""
        try:
            key = self._sends.get((name, to))
        except TypeError:
            key = None
        if key is not None and key.dst in self._cluster:
            return key
        key = RendezvousKey(self._task, self._incarnation, self._cluster.resolve(to), check_name(name))
        self._keep(self._sends, (name, to), key)
        return key

    def _keep(self, table: dict[tuple[str, str], Any], at: tuple[str, str], made: Any) -> None:
        if len(table) >= self.LIMIT:
            table.clear()
        table[at] = made
