"""The owner's side of a publication (:mod:`.publication`): its two slots and header in
memory for one-sided access, registered read-only, and the updates that write them."""
from __future__ import annotations

import threading
import time
import zlib
from typing import Any, Callable, Mapping, Protocol

import numpy as np

from .. import _core
from ..errors import InvalidArgumentError, NotFoundError
from .buffer import RemoteBuffer
from .publication import (CURRENT, HEADER_WORDS, MAX_HOLD_SECONDS, SEQUENCES, SLOT_VERSION, PublicationRef,
                          checked_version, current, host_arrays, layout)


#: an update's default grace: the time to read the tensors at this many bytes a second,
#: and at least MIN_GRACE seconds
GRACE_RATE, MIN_GRACE = 1e9, 0.001


class Owner(Protocol):
    """What a publication needs of its task's one-sided access (:class:`tensorverbs.one_sided.OneSided`)."""

    def allocate(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray: ...

    def register(self, tensor: Any, writable: bool) -> RemoteBuffer: ...

    def unregister(self, buffer: RemoteBuffer) -> None: ...


class Publication:
    """A set of tensors this task publishes (:meth:`tensorverbs.Server.publish`): hand
    :attr:`ref` to the tasks that read it; :meth:`update` publishes the next version,
    :meth:`close` ends it (so does stopping the server). The tensors are copied in: the
    caller's stay theirs.

    An update overwrites the copy of the version before the current one, which readers
    that started before the current one was published may still be reading: it waits
    until ``grace`` seconds have passed since then (default: the time to read the tensors
    at GRACE_RATE), so that a read shorter than ``grace`` never reads again, however often
    the owner updates. A reader whose read was overwritten holds the next update for about
    twice its read (:meth:`hold`); holds delay one update by MAX_HOLD_SECONDS at most."""

    def __init__(self, one_sided: Owner, tensors: Mapping[str, Any], version: int, checksums: bool,
                 grace: float | None, closed: Callable[["Publication"], None]) -> None:
        arrays = host_arrays(tensors)
        version = checked_version(version)
        described, crcs, nbytes = layout(arrays, checksums)
        self._lock = threading.Lock()  # updates take turns
        self._header = one_sided.allocate((HEADER_WORDS,), np.dtype(np.uint64))
        self._header[...] = 0
        self._slots = [one_sided.allocate((nbytes,), np.dtype(np.uint8)) for _ in range(2)]
        self._views = [{t.name: slot[t.offset:t.offset + t.nbytes].view(arrays[t.name].dtype).reshape(t.shape)
                        for t in described} for slot in self._slots]
        self._crcs = [None if crcs is None else slot[crcs:crcs + 4 * len(described)].view(np.uint32)
                      for slot in self._slots]
        self._index = {t.name: i for i, t in enumerate(described)}  # of each tensor's checksum
        self._version, self._slot = 0, 1
        self._grace = max(MIN_GRACE, nbytes / GRACE_RATE) if grace is None else grace
        self._published_at = 0.0
        #: what an update waits on: readers' holds (no update before ``_held_until``, of
        #: time.monotonic()) and closing
        self._waits = threading.Condition(threading.Lock())
        self._held_until = 0.0
        self._closing = False
        self._holding = threading.Event()  # set while an update waits for a hold
        self._write(arrays, version)
        self._unregister: Callable[[RemoteBuffer], None] | None = one_sided.unregister
        self._closed = closed
        registered: list[RemoteBuffer] = []
        try:
            for memory in (self._header, *self._slots):
                registered.append(one_sided.register(memory, writable=False))
        except BaseException:
            for buffer in registered:
                one_sided.unregister(buffer)
            raise
        header, slot0, slot1 = registered
        self.ref = PublicationRef(header.task, header, (slot0, slot1), described, crcs)

    @property
    def version(self) -> int:
        """The version readers get now."""
        return self._version

    @property
    def closed(self) -> bool:
        return self._unregister is None or self._closing

    def hold(self, seconds: float) -> None:
        """Make updates wait until ``seconds`` (at most MAX_HOLD_SECONDS) from now: what a
        reader whose read an update overwrote asks (HoldPublication); never blocks."""
        with self._waits:
            self._held_until = max(self._held_until, time.monotonic() + min(max(seconds, 0.0), MAX_HOLD_SECONDS))

    def release(self) -> None:
        """End every hold now."""
        with self._waits:
            self._held_until = 0.0
            self._waits.notify_all()

    def update(self, tensors: Mapping[str, Any], *, version: int | None = None) -> int:
        """Publish ``tensors`` (every tensor of the publication, by name, each of its dtype
        and shape) as ``version`` (default: the current one plus one; it must be greater),
        and return it. Readers that start once this returns get it; a read under way
        returns the version before, or reads again. Updates from several threads take
        turns. NotFoundError once the publication is closed (or closes meanwhile)."""
        arrays = host_arrays(tensors)
        with self._lock:
            if self.closed:
                raise NotFoundError(f"{self.ref} was closed")
            version = checked_version(self._version + 1 if version is None else version, self._version)
            theirs = self._views[0]
            if arrays.keys() != theirs.keys():
                missing, unknown = theirs.keys() - arrays.keys(), arrays.keys() - theirs.keys()
                raise InvalidArgumentError(f"an update of {self.ref} gives every tensor of it: "
                                           f"missing {sorted(missing)}, unknown {sorted(unknown)}")
            for name, array in arrays.items():
                if array.dtype != theirs[name].dtype or array.shape != theirs[name].shape:
                    raise InvalidArgumentError(
                        f"tensor {name!r} is {array.dtype} {array.shape}; {self.ref} holds "
                        f"{theirs[name].dtype} {theirs[name].shape}")
            self._wait_for_readers()
            self._write(arrays, version)
        return version

    def _wait_for_readers(self) -> None:
        """Wait out the grace since the last update and readers' holds (these for
        MAX_HOLD_SECONDS at most); NotFoundError if the publication closes meanwhile."""
        holds_end = time.monotonic() + MAX_HOLD_SECONDS
        with self._waits:
            while not self._closing:
                now = time.monotonic()
                held = min(self._held_until, holds_end)
                wait = max(self._published_at + self._grace, held) - now
                if wait <= 0:
                    break
                if held > now:
                    self._holding.set()
                self._waits.wait(wait)
            self._holding.clear()
            if self._closing:
                raise NotFoundError(f"{self.ref} was closed")

    def _write(self, arrays: Mapping[str, np.ndarray], version: int) -> None:
        """Write ``arrays`` and ``version`` into the slot not current and make it current."""
        slot = 1 - self._slot
        sequence = _core.load_fenced(self._header, SEQUENCES + slot)
        _core.store_fenced(self._header, SEQUENCES + slot, sequence + 1)  # odd: being written
        _core.store_fenced(self._slots[slot].view(np.uint64), SLOT_VERSION, version)
        views, crcs = self._views[slot], self._crcs[slot]
        for name, array in arrays.items():
            np.copyto(views[name], array)
            if crcs is not None:
                crcs[self._index[name]] = zlib.crc32(views[name].reshape(-1).view(np.uint8).data)
        _core.store_fenced(self._header, SEQUENCES + slot, sequence + 2)
        _core.store_fenced(self._header, CURRENT, current(version, slot))
        self._version, self._slot, self._published_at = version, slot, time.monotonic()

    def close(self) -> None:
        """End the publication: later reads fail with NotFoundError, and one under way
        finishes first; an update waiting for readers fails. Closing it again does
        nothing."""
        with self._waits:
            self._closing = True
            self._waits.notify_all()
        with self._lock:  # (an update under way ends first)
            unregister, self._unregister = self._unregister, None
        if unregister is None:
            return
        self._closed(self)
        for buffer in (self.ref.header, *self.ref.slots):
            try:
                unregister(buffer)
            except NotFoundError:  # the server stopped, which unregistered it
                pass

    def __enter__(self) -> "Publication":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Publication {self.ref} at version {self._version}>"
