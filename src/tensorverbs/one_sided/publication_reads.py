"""The readers' side of a publication (:mod:`.publication`): a read of its current version,
whole, read again while the owner overwrote the slot being read."""
from __future__ import annotations

import logging
import threading
import time
import zlib
from typing import TYPE_CHECKING, Any, Mapping, Protocol

import numpy as np

from ..errors import DataLossError, DeadlineExceededError, InvalidArgumentError, TensorverbsError
from ..out import Out
from ..tensor import dtype_enum, numeric_dtype
from .publication import (CURRENT, MAX_HOLD_SECONDS, SEQUENCES, SLOT_VERSION, PublicationRef, Published,
                          PublishedTensor, version_and_slot)

log = logging.getLogger(__name__)

#: a hold asks for this much more than twice the last read of the slot took (seconds)
HOLD_MARGIN = 0.05
#: before any read of the slot was timed, it is reckoned to go at this many bytes a second
HOLD_RATE = 1e8
#: how long a reader waits for the owner to answer a hold (seconds)
HOLD_ASK_SECONDS = 5.0

if TYPE_CHECKING:
    from ..stats import Counters


class Access(Protocol):
    """What a read needs of the task's one-sided access (:class:`tensorverbs.one_sided.OneSided`)."""

    def read_words(self, buffer: Any, first: int, count: int, timeout: float | None,
                   cancel: threading.Event | None = None) -> list[int]: ...

    def read_bytes(self, reads: list[tuple[Any, np.ndarray, int]], timeout: float | None,
                   cancel: threading.Event | None = None) -> None: ...

    def hold_publication(self, ref: PublicationRef, seconds: float, timeout: float | None) -> None: ...


class _Target:
    """Where one tensor of a read lands (its host bytes) and what the read returns for it."""

    def __init__(self, ref: PublicationRef, tensor: PublishedTensor, out: Any) -> None:
        dtype = numeric_dtype(tensor.dtype)
        self.out: Out | None = None
        if out is None:
            self.result: Any = np.empty(tensor.shape, dtype)
            landing = self.result
        elif (type(out) is np.ndarray and out.dtype == dtype and out.shape == tensor.shape
              and out.flags.c_contiguous and out.flags.writeable):  # lands there as it is
            self.result = landing = out
        else:
            self.out = Out(out)
            enum = dtype_enum(dtype)
            if not self.out.fits(enum, tensor.shape):
                raise self.out.refusal(f"a read of {tensor.name!r} of {ref}", enum, tensor.shape,
                                       "the publication holds", "")
            self.result, landing = out, self.out.landing
        self.bytes = landing.reshape(-1).view(np.uint8)

    def store(self) -> None:
        """The bytes read put in ``out`` where it is on a device (a copy from its landing)."""
        if self.out is not None:
            self.out.device.store(self.out.target, self.out.landing)


def read(one_sided: Access, counters: "Counters", ref: PublicationRef, out: Mapping[str, Any] | None,
         timeout: float | None, cancel: threading.Event | None) -> Published:
    """One whole version of ``ref``'s tensors (into ``out``'s, by name, where given)."""
    out = dict(out or {})
    unknown = out.keys() - {t.name for t in ref.tensors}
    if unknown:
        raise InvalidArgumentError(f"out names tensors that {ref} does not hold: {sorted(unknown)}")
    targets = [_Target(ref, t, out.get(t.name)) for t in ref.tensors]
    crcs, crcs_at = (None, 0) if ref.checksums is None else (np.empty(len(targets), np.uint32), ref.checksums)
    version = np.zeros(1, np.uint64)  # the slot's own, read with its tensors
    deadline = None if timeout is None else time.monotonic() + timeout
    rereads, read_took = 0, sum(t.nbytes for t in ref.tensors) / HOLD_RATE  # (until a read is timed)

    def left() -> float | None:
        return None if deadline is None else max(0.0, deadline - time.monotonic())

    while True:
        if deadline is not None and time.monotonic() >= deadline and rereads:
            raise DeadlineExceededError(
                f"no whole version of {ref} was read within {timeout:g} s: its owner updated it during each "
                f"of {rereads} reads (two updates while one read ran)")
        header = one_sided.read_words(ref.header, CURRENT, 3, left(), cancel)
        _, slot = version_and_slot(header[CURRENT])
        sequence = header[SEQUENCES + slot]
        if sequence % 2 == 0:  # else the owner writes it again (two updates since the header was read)
            started = time.monotonic()
            slot_buffer = ref.slots[slot]
            reads = [(slot_buffer, version.view(np.uint8), 8 * SLOT_VERSION)]
            reads += [(slot_buffer, target.bytes, t.offset) for target, t in zip(targets, ref.tensors)]
            if crcs is not None:
                reads.append((slot_buffer, crcs.view(np.uint8), crcs_at))
            one_sided.read_bytes(reads, left(), cancel)
            again = one_sided.read_words(ref.header, SEQUENCES + slot, 1, left(), cancel)
            read_took = time.monotonic() - started
            if again[0] == sequence:
                break
        rereads += 1
        counters.add("publication_rereads")
        _hold(one_sided, ref, min(MAX_HOLD_SECONDS, 2 * read_took + HOLD_MARGIN), left())
    if crcs is not None:
        for target, t, crc in zip(targets, ref.tensors, crcs):
            if zlib.crc32(target.bytes.data) != int(crc):
                raise DataLossError(f"tensor {t.name!r} of {ref} at version {int(version[0])} does not match "
                                    "its checksum: its bytes changed on the way")
    for target in targets:
        target.store()
    counters.add("publication_reads")
    return Published(int(version[0]), {t.name: target.result for t, target in zip(ref.tensors, targets)})


def _hold(one_sided: Access, ref: PublicationRef, seconds: float, left: float | None) -> None:
    """Ask the owner to hold its updates for ``seconds`` (what this read's next try needs);
    best effort: the read goes on without it (a failed hold is logged)."""
    if left is not None and left <= 0:
        return
    try:
        one_sided.hold_publication(ref, seconds, min(HOLD_ASK_SECONDS, left if left is not None else HOLD_ASK_SECONDS))
    except TensorverbsError as exc:
        log.info("holding %s for the next read failed (reading again without): %s", ref, exc)
