"""What a relay broadcast tells each receiver: where to fetch the tensor and whom to pass
it on to (:class:`RelayDescriptor`), the tree it is read from (:func:`tree`), and the
names of the relay's own tensors.

A relay broadcast sends each receiver this descriptor, as DT_VARIANT bytes under the
tensor's own key, instead of the tensor. The receiver fetches the tensor from its parent
(the sender, or a receiver before it) under the relay's data name, offers it to its
children under that name, and confirms to the sender under an ack name. A large tensor
goes in parts (:func:`part_ranges`), each under a name of its own (:func:`part_name`), so that a
receiver passes on a part while it fetches the next. The bytes come from a peer, so
:meth:`RelayDescriptor.decode` checks every field and length before anything is taken from
them; malformed input raises DataLossError.

Layout (little-endian): magic ``TVRL``, version u8, dtype i32, rank u8, parts u16, flags
u8 (:data:`LATE`, :data:`SERVED`, :data:`GONE`), rank dims i64, the relay's tag, its parent and each child (u8 count, then u16 length + UTF-8
each).
"""
from __future__ import annotations

import hashlib
import math
import struct
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..byte_reader import ByteReader
from ..cluster import MAX_TASK_NAME, TaskName
from ..errors import DataLossError
from ..ipc.descriptor import RELAY_MAGIC as MAGIC
from ..tensor import VARIANT_DTYPE, numpy_dtype

VERSION = 3
#: flags of the descriptor: the relay serves late receivers (its receivers keep the tensor);
#: this one is a late receiver's, its parent serving it at :func:`served_step`; nobody keeps
#: the tensor any more (the recv fails)
LATE, SERVED, GONE = 1, 2, 4
_FLAGS = LATE | SERVED | GONE
#: the most children a receiver passes a tensor on to
MAX_FANOUT = 16
#: a tensor of at least twice this many bytes is relayed in parts of at least this many
PART_BYTES = 4 << 20
#: the most parts a tensor is relayed in (larger parts beyond PART_BYTES * MAX_PARTS)
MAX_PARTS = 64
#: where parts start and end (but the last's end): a multiple of this many bytes
PART_ALIGN = 4096
#: tensor names that start so are a relay's own (the data, its confirmations)
PREFIX = ".tv-relay:"
_MAX_TEXT = max(MAX_TASK_NAME, 128)

_HEAD = struct.Struct("<4sBiBHB")


@dataclass(frozen=True)
class RelayDescriptor:
    """One receiver's share of a relay broadcast: the tensor's dtype and shape, the relay's
    ``tag`` (what its names start with), the task to fetch from and those to pass it on to,
    the number of parts the tensor goes in (1: whole, under :attr:`data`), whether
    receivers that ask later are served (``late``: each receiver keeps what it got for them,
    until it cleans the step up), whether this is a late receiver's (``served``), and whether
    nobody keeps the tensor any more (``gone``)."""

    tag: str
    dtype: int
    shape: tuple[int, ...]
    parent: str
    children: tuple[str, ...] = ()
    parts: int = 1
    late: bool = False
    served: bool = False
    gone: bool = False

    @property
    def data(self) -> str:
        """The name the tensor goes by from parent to child."""
        return data_name(self.tag)

    @property
    def step(self) -> int:
        """The step a receiver passes the tensor on at: one of the relay's own (negative,
        from its tag), so that the receiver cleaning its step up does not drop it."""
        return _own_step(self.tag)

    @property
    def nbytes(self) -> int:
        """The tensor's size in bytes."""
        return _nbytes(self.dtype, self.shape)

    @property
    def direct(self) -> str:
        """The name the sender offers it under to a receiver whose parent is gone."""
        return direct_name(self.tag)

    def encode(self) -> np.ndarray:
        """The descriptor as DT_VARIANT bytes: a 1-D array of :data:`VARIANT_DTYPE`."""
        flags = (LATE if self.late else 0) | (SERVED if self.served else 0) | (GONE if self.gone else 0)
        fields = [_HEAD.pack(MAGIC, VERSION, self.dtype, len(self.shape), self.parts, flags),
                  struct.pack(f"<{len(self.shape)}q", *self.shape), _texts([self.tag]),
                  _texts([self.parent]), _texts(self.children)]
        return np.frombuffer(b"".join(fields), VARIANT_DTYPE)

    @classmethod
    def decode(cls, data: Any) -> "RelayDescriptor":
        """Parse DT_VARIANT bytes from a peer; DataLossError if they are not a descriptor."""
        reader = ByteReader(bytes(memoryview(data).cast("B")), "relay descriptor")
        magic, version, dtype, rank, count, flags = reader.take(_HEAD)
        if magic != MAGIC or version != VERSION or flags & ~_FLAGS:
            raise DataLossError(f"not a relay descriptor (magic {magic!r}, version {version}, flags {flags:#x})")
        shape = reader.shape(dtype, rank)
        if not 1 <= count <= MAX_PARTS or (count > 1 and _nbytes(dtype, shape) < count * PART_ALIGN):
            raise DataLossError(f"relay descriptor of {count} parts for {_nbytes(dtype, shape)} bytes")
        tags, parents = _read_texts(reader, 1), _read_texts(reader, 1)
        children = _read_texts(reader, MAX_FANOUT)
        reader.end()
        if len(tags) != 1 or not tags[0].startswith(PREFIX) or len(parents) != 1:
            raise DataLossError("relay descriptor without its tag or parent")
        return cls(tags[0], dtype, tuple(shape), parents[0], tuple(children), count, bool(flags & LATE),
                   bool(flags & SERVED), bool(flags & GONE))


@dataclass(frozen=True)
class Relayed:
    """What a recv's delivery makes of a relay descriptor from ``origin``: followed
    (:meth:`~tensorverbs.rendezvous.relay.Relays.follow`) before the recv's caller sees
    anything."""

    descriptor: RelayDescriptor
    origin: TaskName


def is_relay(array: np.ndarray) -> bool:
    """Whether a received array is a relay descriptor (DT_VARIANT bytes with its magic)."""
    return array.dtype == VARIANT_DTYPE and array[:4].view(np.uint8).tobytes() == MAGIC


def served_step(tag: str, receiver: str) -> int:
    """The step a receiver of a relay serves its tensor to late receiver ``receiver`` at:
    one of its own, so that cleaning it up touches nothing else."""
    return _own_step(f"{tag}>{receiver}")


def _own_step(text: str) -> int:
    """A step of the relays' own (negative, far from any step a caller uses), from ``text``."""
    digest = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
    return -(1 << 62) - (digest & ((1 << 61) - 1))


def data_name(tag: str) -> str:
    """The name a relay's tensor goes by from parent to child."""
    return tag + ":data"


def direct_name(tag: str) -> str:
    """The name a relay's sender offers its tensor under to a receiver whose parent is gone."""
    return tag + ":direct"


def part_name(tag: str, part: int) -> str:
    """The name part ``part`` of a relay's tensor goes by from parent to child."""
    return f"{tag}:part{part}"


def part_count(nbytes: int) -> int:
    """The number of parts a tensor of ``nbytes`` is relayed in (1: whole)."""
    return 1 if nbytes < 2 * PART_BYTES else min(MAX_PARTS, nbytes // PART_BYTES)


def part_ranges(nbytes: int, count: int) -> list[tuple[int, int]]:
    """The byte ranges (start, end) of ``count`` parts of a tensor of ``nbytes``: about
    equal, each starting at a multiple of 4 KiB."""
    starts = [(i * nbytes // count) // PART_ALIGN * PART_ALIGN for i in range(count)] + [nbytes]
    return [(starts[i], starts[i + 1]) for i in range(count)]


def part_views(array: np.ndarray, count: int) -> list[np.ndarray]:
    """The bytes of each of ``count`` parts of ``array`` (C-contiguous): views, in order."""
    flat = array.reshape(-1).view(np.uint8)
    return [flat[start:end] for start, end in part_ranges(array.nbytes, count)]


def pieces(tag: str, array: np.ndarray, count: int) -> list[tuple[str, np.ndarray]]:
    """What relay ``tag`` offers of ``array`` (``count`` parts): (name, bytes) of each part
    in order, or of the whole tensor under its data name."""
    if count == 1:
        return [(data_name(tag), array)]
    return [(part_name(tag, part), view) for part, view in enumerate(part_views(array, count))]


def _nbytes(dtype: int, shape: tuple[int, ...]) -> int:
    return numpy_dtype(dtype).itemsize * math.prod(shape)


def ack_name(tag: str, attempt: int) -> str:
    """The name of a receiver's ``attempt``-th confirmation to the sender (0: from its
    parent, 1: fetched from the sender directly)."""
    return f"{tag}:ack{attempt}"


def tree(count: int, fanout: int) -> list[tuple[int, list[int]]]:
    """The relay tree over receivers 0..count-1 in order, the sender at its root: each
    receiver's (parent, children), a parent of -1 being the sender; ``fanout`` children
    each (1: a chain)."""
    nodes = []
    for i in range(count):  # receiver i sits at position i + 1, the sender at 0
        first = (i + 1) * fanout
        nodes.append((i // fanout - 1, [c for c in range(first, first + fanout) if c < count]))
    return nodes


def _texts(items: Sequence[str]) -> bytes:
    encoded = [item.encode() for item in items]
    return struct.pack("<B", len(encoded)) + b"".join(struct.pack("<H", len(e)) + e for e in encoded)


def _read_texts(reader: ByteReader, limit: int) -> list[str]:
    return [reader.text(_MAX_TEXT) for _ in range(reader.count(limit, "names"))]
