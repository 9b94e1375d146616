"""Work-request ids: what a send-side completion belongs to (the seeds' RdmaWriteID)."""
from __future__ import annotations

import enum


class WorkKind(enum.IntEnum):
    MESSAGE = 1       # value: the tx slot
    ACK = 2
    TENSOR_WRITE = 3  # value: the request index being answered
    TENSOR_READ = 4   # value: our request index


_SHIFT = 56


def wr_id(kind: WorkKind, value: int) -> int:
    return (int(kind) << _SHIFT) | value


def split(work_id: int) -> tuple[WorkKind, int]:
    return WorkKind(work_id >> _SHIFT), work_id & ((1 << _SHIFT) - 1)
