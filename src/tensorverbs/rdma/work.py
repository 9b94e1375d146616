"""Work-request ids: what a send-side completion belongs to (the seeds' RdmaWriteID)."""
from __future__ import annotations

import enum


class WorkKind(enum.IntEnum):
    """What a send-side work request does (the high byte of its id)."""

    MESSAGE = 1       # value: the tx slot (posted unsignaled)
    ACK = 2           # posted unsignaled
    TENSOR_WRITE = 3  # value: the request index being answered
    TENSOR_READ = 4   # value: our request index


_SHIFT = 56


def wr_id(kind: WorkKind, value: int) -> int:
    """The id of a work request of ``kind`` about ``value``."""
    return (int(kind) << _SHIFT) | value


def split(work_id: int) -> tuple[WorkKind | None, int]:
    """(kind, value) of an id made by :func:`wr_id`; kind None for any other id."""
    kind = work_id >> _SHIFT
    return (WorkKind(kind) if kind in WorkKind._value2member_map_ else None), work_id & ((1 << _SHIFT) - 1)
