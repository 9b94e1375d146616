"""Rendezvous keys in TensorFlow's format.

``src_device;src_incarnation;dst_device;tensor_name;frame_id:iter_id``, the incarnation
printed as 16 hex digits (TensorFlow's ``FpToString``), e.g.::

    /job:ps/replica:0/task:0/device:CPU:0;00000000075bcd15;/job:worker/replica:0/task:0/device:CPU:0;w1;0:0
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..arguments import instance, text as check_text
from ..cluster import TaskName, parse_task
from ..errors import InvalidArgumentError

_NAME = re.compile(r"^[^;\x00]{1,512}$")
_FRAME_ITER = re.compile(r"^(\d+):(\d+)$")


def check_name(name: str) -> str:
    """A tensor name: 1-512 characters (UTF-8 bytes at most 512), no ';'."""
    try:
        if isinstance(name, str) and _NAME.match(name) and len(name.encode()) <= 512:
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
