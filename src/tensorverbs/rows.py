"""The rows of a buffer (its first dimension) that calls move blocks between: the checks
of such a buffer, and of an index naming some of its rows."""
from __future__ import annotations

from typing import Any

import numpy as np

from .errors import InvalidArgumentError
from .tensor import dtype_enum


def row_buffer(array: np.ndarray, what: str) -> np.ndarray:
    """``array`` (the host view of the caller's ``what``), checked to be rows of raw bytes:
    a first dimension, numeric, of this machine's byte order, C-contiguous."""
    if array.ndim < 1:
        raise InvalidArgumentError(f"{what} must have a first dimension (its rows, the blocks), not shape ()")
    if array.dtype.kind in "OSUMm":
        raise InvalidArgumentError(f"{what} must be numeric, not {array.dtype}: blocks are raw bytes")
    if array.dtype.byteorder not in "=|":
        raise InvalidArgumentError(f"{what} is {array.dtype}, of the other byte order: blocks travel as "
                                   "they are in memory (astype(dtype.newbyteorder('=')) first)")
    dtype_enum(array.dtype)  # (one tensorverbs moves)
    if not array.flags.c_contiguous:
        raise InvalidArgumentError(f"{what} must be C-contiguous")
    return array


def row_index(index: Any, rows: int, what: str, label: str = "index", distinct: bool = False) -> np.ndarray:
    """``index`` (None: every one of the ``rows`` rows of ``what``, in order) as an int64
    array of its own (the core reads it without the GIL); InvalidArgumentError for what is
    not a 1-D sequence of integers, a row ``what`` lacks, or (``distinct``) a row named
    twice."""
    if index is None:
        return np.arange(rows, dtype=np.int64)
    given = np.asarray(index)
    if given.ndim != 1 or (given.size and given.dtype.kind not in "iu"):
        raise InvalidArgumentError(f"{label} must be a 1-D sequence of integers (rows of {what}), "
                                   f"not {given.dtype} of shape {given.shape}")
    if given.dtype.kind == "u" and given.size and int(given.max()) > np.iinfo(np.int64).max:
        raise InvalidArgumentError(f"{label}[{int(np.argmax(given))}] is {int(given.max())}: {what} has {rows} rows")
    chosen = np.array(given, dtype=np.int64)
    bad = np.flatnonzero((chosen < 0) | (chosen >= rows))
    if bad.size:
        raise InvalidArgumentError(f"{label}[{bad[0]}] is {chosen[bad[0]]}: {what} has {rows} rows")
    if distinct:
        _refuse_repeats(chosen, label, what)
    return chosen


def _refuse_repeats(rows: np.ndarray, label: str, what: str) -> None:
    """InvalidArgumentError naming the first entry whose row an entry before it has: two
    blocks cannot land in one row."""
    order = np.argsort(rows, kind="stable")
    repeats = order[1:][rows[order][1:] == rows[order][:-1]]
    if repeats.size:
        first = int(repeats.min())
        raise InvalidArgumentError(f"{label}[{first}] is {rows[first]} again: a row of {what} takes one block")
