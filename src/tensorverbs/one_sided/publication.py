"""A publication: a set of tensors a task publishes under a version, for any task of the
job to read one-sided, one whole version at a time and never a mix of two
(:meth:`tensorverbs.Server.publish`).

The owner keeps two slots, each with its version (an 8-byte word) and room for every
tensor of the set, and a header of 8-byte words: the current version and the slot holding
it (``version << 1 | slot``), then each slot's sequence number, odd while the owner writes
that slot (a fourth word is spare). An update writes the slot that is not current (its
sequence odd meanwhile), then makes it current. A reader reads the header, then the
current slot (its version and tensors), then that slot's sequence again: unchanged and
even, the version and tensors read are one version, whole (the header's words are read in
one go but not at one instant: they only choose the slot); else the owner wrote the slot
meanwhile and the reader reads again. With two slots a read overlaps an update only
when the owner publishes twice while it runs. Each read waits for the one before it, so
the three are in order on any transport. A reader that had to read again asks the owner
over the control plane to hold its updates for about twice that read's time
(HoldPublication), so that its next read completes: readers slower than the owner's
updates are not starved.

This module is the layout both sides agree on and what readers are handed
(:class:`PublicationRef`); :mod:`.publisher` is the owner's side, :mod:`.publication_reads`
the readers'.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, NamedTuple

import numpy as np

from ..devices import HOST, device_of
from ..dlpack import host_view, is_tensor
from ..errors import InvalidArgumentError
from ..tensor import numeric_dtype
from .buffer import RemoteBuffer

#: the header's words: the current version and slot, then the sequence of each slot
CURRENT, SEQUENCES, HEADER_WORDS = 0, 1, 4
#: the word of a slot that holds its version (the tensors start at ALIGN)
SLOT_VERSION = 0
#: where each tensor starts in a slot (a multiple of this, a cache line)
ALIGN = 64
#: versions are 62-bit (one bit holds the slot, one is spare)
MAX_VERSION = (1 << 62) - 1
#: the longest readers' holds keep an update waiting (seconds)
MAX_HOLD_SECONDS = 10.0
#: the longest grace a publication may have (seconds)
MAX_GRACE_SECONDS = 60.0


@dataclass(frozen=True)
class PublishedTensor:
    """One tensor of a publication: its name, dtype, shape and bytes in each slot."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    offset: int
    nbytes: int


@dataclass(frozen=True)
class PublicationRef:
    """What a task hands out for its :class:`~tensorverbs.one_sided.publisher.Publication`:
    small, immutable and serialisable like a :class:`RemoteBuffer`; any task of the job
    reads the publication with :meth:`tensorverbs.Server.read_publication` until its owner
    closes it. ``checksums`` is where each slot keeps a CRC-32 per tensor (None: none)."""

    task: str
    header: RemoteBuffer
    slots: tuple[RemoteBuffer, RemoteBuffer]
    tensors: tuple[PublishedTensor, ...]
    checksums: int | None

    def __str__(self) -> str:
        names = ", ".join(repr(t.name) for t in self.tensors[:4]) + (", ..." if len(self.tensors) > 4 else "")
        return f"the publication of {self.task} ({len(self.tensors)} tensors: {names})"


class Published(NamedTuple):
    """What :meth:`tensorverbs.Server.read_publication` returns: the version read, and every
    tensor of it by name."""

    version: int
    tensors: dict[str, Any]


def current(version: int, slot: int) -> int:
    """The header's first word for ``version`` held in ``slot``."""
    return version << 1 | slot


def version_and_slot(word: int) -> tuple[int, int]:
    """(version, slot) of the header's first word."""
    return word >> 1, word & 1


def checked_version(version: Any, after: int | None = None) -> int:
    """``version``, an int in [1, MAX_VERSION] (greater than ``after`` when given)."""
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= MAX_VERSION:
        raise InvalidArgumentError(f"version must be an int in [1, 2**62), not {version!r}")
    if after is not None and version <= after:
        raise InvalidArgumentError(f"version {version} must be greater than the current version {after}")
    return version


def host_arrays(tensors: Any) -> dict[str, np.ndarray]:
    """``tensors`` (a mapping of names to tensors) as C-contiguous numpy arrays in native
    byte order by name (a tensor on a device copied to the host, one strided or of the
    other byte order copied so)."""
    if not isinstance(tensors, Mapping) or not tensors:
        raise InvalidArgumentError(f"tensors must be a non-empty mapping of names to tensors, "
                                   f"not {type(tensors).__name__}")
    arrays = {}
    for name, tensor in tensors.items():
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError(f"a publication's names must be non-empty str, not {name!r}")
        device = device_of(tensor)
        value = tensor if device is HOST else device.to_host(tensor)
        array = host_view(value) if is_tensor(value) else value
        if not isinstance(array, np.ndarray):
            raise InvalidArgumentError(f"tensor {name!r} must be a numpy array or a tensor, not {type(value).__name__}")
        numeric_dtype(array.dtype)  # numeric: strings have no bytes to publish
        arrays[name] = np.ascontiguousarray(array, array.dtype.newbyteorder("="))
    return arrays


def layout(arrays: Mapping[str, np.ndarray], checksums: bool) -> tuple[tuple[PublishedTensor, ...], int | None, int]:
    """Where each array lies in a slot, where the checksums lie (None: none), and the
    slot's size in bytes."""
    tensors, at = [], ALIGN  # (after the slot's version)
    for name, array in arrays.items():
        tensors.append(PublishedTensor(name, array.dtype.name, tuple(array.shape), at, array.nbytes))
        at += -(-array.nbytes // ALIGN) * ALIGN
    crcs = at if checksums else None
    size = at + (4 * len(tensors) if checksums else 0)
    return tuple(tensors), crcs, -(-size // 8) * 8  # (whole words: the slot's version is one)
