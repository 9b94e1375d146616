"""Protection domains and memory regions over pyverbs.

``alloc_mr`` maps anonymous shared memory, pre-faulted (``MAP_POPULATE``), and registers
it at its address, so ``buf`` is a plain writable memoryview. Shared rather than private:
a process that forks after registering keeps its pages instead of copy-on-write copies
the device no longer points at. ``reg_mr`` registers a caller's buffer (a numpy array, a
bytearray, an mmap) in place, zero-copy, and pins it (a bytearray cannot be resized
while registered).

rdma-core's pyverbs registers a caller-given address with ``MR(pd, length, access,
address=...)`` (rdma-core 44 does). An older pyverbs without ``address=`` can only
register memory it allocates itself: ``alloc_mr`` then uses that memory and ``reg_mr``
raises UnimplementedError saying so.
"""
from __future__ import annotations

import ctypes
import mmap
from typing import TYPE_CHECKING, Any

from ...errors import InvalidArgumentError, UnimplementedError
from ..api import MemoryRegion, ProtectionDomain
from ..model import Access
from . import _pyverbs
from ._owner import Owner, check_open as _check_open

if TYPE_CHECKING:
    from .device import IbverbsContext

_PAGE = mmap.PAGESIZE


def _register(pd, length: int, access: Access, address: int | None):
    """A pyverbs MR of ``length`` bytes at ``address`` (None: memory pyverbs allocates)."""
    pv = _pyverbs.load()
    what = f"registering {length} bytes of memory (access {access!r})"
    with _pyverbs.translated(what):
        if address is None:
            return pv.mr.MR(pd, length, int(access))
        return pv.mr.MR(pd, length, int(access), address=address)


class IbverbsPD(Owner, ProtectionDomain):
    """``ibv_pd``: the memory regions and queue pairs of one context."""

    def __init__(self, context: "IbverbsContext") -> None:
        pv = _pyverbs.load()
        self.context = context
        self._init_owner()
        self._regions: dict[int, tuple[int, int]] = {}  # lkey -> (addr, length), live MRs
        self._fence_mr = None
        with _pyverbs.translated(f"allocating a protection domain on {context.device.name}"):
            self._pd = pv.pd.PD(context._ctx)

    def alloc_mr(self, length: int, access: Access) -> "IbverbsMR":
        _check_open(self)
        if length <= 0:
            raise InvalidArgumentError(f"a memory region needs a positive length, not {length}")
        if length > self.context.device.max_mr_size:
            raise InvalidArgumentError(
                f"{length} bytes exceed max_mr_size {self.context.device.max_mr_size} "
                f"of {self.context.device.name}")
        mapped = -(-length // _PAGE) * _PAGE
        area = mmap.mmap(-1, mapped, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS
                         | getattr(mmap, "MAP_POPULATE", 0))
        anchor = ctypes.c_char.from_buffer(area)
        address = ctypes.addressof(anchor)
        del anchor  # the address stays valid while ``area`` is mapped
        try:
            mr = _register(self._pd, length, access, address)
        except TypeError:  # pyverbs without address=: use the memory it allocates
            area.close()
            mr = _register(self._pd, length, access, None)
            raw = (ctypes.c_char * length).from_address(mr.buf)
            return self._adopt(IbverbsMR(self, mr, access, memoryview(raw).cast("B"),
                                              keep=(raw,)))
        except BaseException:
            area.close()
            raise
        return self._adopt(IbverbsMR(self, mr, access, memoryview(area)[:length], area=area))

    def reg_mr(self, buffer: Any, access: Access) -> "IbverbsMR":
        _check_open(self)
        try:
            view = memoryview(buffer)
        except TypeError:
            raise InvalidArgumentError(
                f"cannot register a {type(buffer).__name__}: it does not export a buffer") from None
        except ValueError as exc:  # e.g. a numpy dtype the buffer protocol cannot describe
            raise InvalidArgumentError(
                f"cannot register this {type(buffer).__name__} ({exc}); register a uint8 view "
                "of it instead (numpy: array.view(numpy.uint8))") from None
        if view.readonly:
            raise InvalidArgumentError("cannot register a read-only buffer: registration "
                                       "needs writable memory")
        if not view.c_contiguous:
            raise InvalidArgumentError("cannot register a non-contiguous buffer")
        if view.nbytes == 0:
            raise InvalidArgumentError("cannot register an empty buffer")
        flat = view.cast("B") if view.ndim != 1 or view.format != "B" else view
        pin = (ctypes.c_char * flat.nbytes).from_buffer(flat)  # holds the buffer in place
        try:
            mr = _register(self._pd, flat.nbytes, access, ctypes.addressof(pin))
        except TypeError:
            raise UnimplementedError(
                "this pyverbs cannot register caller memory (its MR takes no address=, "
                "rdma-core before 2020): use ProtectionDomain.alloc_mr and copy into it"
            ) from None
        return self._adopt(IbverbsMR(self, mr, access, flat, keep=(pin, view, buffer)))

    def _adopt(self, mr: "IbverbsMR") -> "IbverbsMR":
        self._regions[mr.lkey] = (mr.addr, mr.length)
        return self.context.own(self.own(mr))

    def region_of(self, lkey: int) -> tuple[int, int] | None:
        """(addr, length) of this PD's live region ``lkey``, None if it is not one."""
        return self._regions.get(lkey)

    def fence(self) -> tuple[int, int]:
        """(addr, lkey) just past the end of a small region of this PD: an SGE moved there
        fails the device's local protection check before a byte moves."""
        if self._fence_mr is None:
            self._fence_mr = _register(self._pd, 64, Access.LOCAL_WRITE, None)
        return self._fence_mr.buf + 64, self._fence_mr.lkey

    def _close(self) -> None:
        self.close_owned()
        with _pyverbs.translated("deallocating a protection domain"):
            if self._fence_mr is not None:
                self._fence_mr.close()
            self._pd.close()


class IbverbsMR(MemoryRegion):
    """``ibv_mr`` over memory the region owns (``alloc_mr``) or the caller's (``reg_mr``)."""

    def __init__(self, pd: IbverbsPD, mr, access: Access, buf: memoryview,
                 keep: tuple = (), area: mmap.mmap | None = None) -> None:
        self.pd = pd
        self._mr = mr
        self._keep = keep
        self._area = area
        self.buf = buf
        self.addr = mr.buf
        self.length = buf.nbytes
        self.lkey = mr.lkey
        self.rkey = mr.rkey
        self.access = Access(access)

    def _close(self) -> None:
        if self.pd._regions.get(self.lkey) == (self.addr, self.length):
            del self.pd._regions[self.lkey]
        with _pyverbs.translated("deregistering a memory region"):
            self._mr.close()
        self._keep = ()
        if self._area is not None:
            try:
                self.buf.release()
                self._area.close()
            except BufferError:  # views of it are still alive: unmapped when they go
                pass
            self._area = None
