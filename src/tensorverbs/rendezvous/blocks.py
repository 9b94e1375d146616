"""Blocks: many tensors of one dtype and shape that are rows of one buffer (the pages of a
paged KV cache), sent or received in one call.

Entry ``i`` of a batch is the tensor ``f"{name}/{i}"``, an ordinary tensor on the wire (an
ordinary send or recv of that name meets it), and row ``index[i]`` of the buffer (row ``i``
without an index). The protocol takes the whole batch as arrays, without a Python object per
entry where it can (:meth:`~.remote.RemoteRendezvous.recv_blocks`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InvalidArgumentError
from ..rows import row_buffer, row_index
from ..tensor import DT_STRING, DT_VARIANT, dtype_enum, numpy_dtype
from .key import MAX_NAME_BYTES, check_name


@dataclass(frozen=True)
class Blocks:
    """A batch of blocks: entry ``i`` is tensor ``f"{name}/{i}"``, row ``rows[i]`` of
    ``array`` (host memory, C-contiguous; its first dimension counts the rows)."""

    name: str
    array: np.ndarray
    rows: np.ndarray  # int64, one per entry

    @property
    def dtype(self) -> int:
        """The blocks' DataType."""
        return dtype_enum(self.array.dtype)

    @property
    def shape(self) -> tuple[int, ...]:
        """One block's shape."""
        return tuple(self.array.shape[1:])

    @property
    def nbytes(self) -> int:
        """One block's size in bytes."""
        return int(self.array.itemsize * int(np.prod(self.shape, dtype=np.int64)))

    def __len__(self) -> int:
        return len(self.rows)

    def entry(self, i: int) -> str:
        """Entry ``i``'s tensor name."""
        return f"{self.name}/{i}"

    def names(self) -> str:
        """The batch's names, for its send's description: "kv/0..1999" ("kv/0" for one)."""
        return self.entry(0) if len(self) == 1 else f"{self.name}/0..{max(len(self) - 1, 0)}"

    def refusal(self, i: int, dtype: int, shape: tuple[int, ...], is_dead: bool) -> InvalidArgumentError:
        """The error of entry ``i``, whose sender sent a tensor that is not a block of this
        batch (it is kept for the next recv of it)."""
        if dtype == DT_VARIANT:
            sent = "a descriptor (a send by relay or by handle): receive it with recv"
        else:
            sent = f"{'string' if dtype == DT_STRING else numpy_dtype(dtype)} {tuple(shape)}"
        return InvalidArgumentError(
            f"block {self.entry(i)!r} lands in a row of {self.array.dtype} {self.shape}, the sender "
            f"sent {sent}; the tensor is kept for the next recv of it")


def layout(name: str, array: np.ndarray, index: Any, what: str) -> Blocks:
    """The batch of ``name`` over ``array`` (the host view of the caller's ``what``: "out" or
    "blocks") and ``index`` (None: every row in order); InvalidArgumentError naming what is
    wrong."""
    check_name(name)
    row_buffer(array, what)
    rows = row_index(index, array.shape[0], what, distinct=what == "out")
    longest = f"{name}/{max(len(rows) - 1, 0)}"
    if len(longest.encode()) > MAX_NAME_BYTES:
        raise InvalidArgumentError(f"name {name!r} is too long for {len(rows)} blocks: {longest!r} "
                                   f"exceeds {MAX_NAME_BYTES} bytes")
    return Blocks(name, array, rows)
