"""Shared-memory segments: memfd-backed memory of this process, and mappings of another
process's segments opened through ``/proc/<pid>/fd/<fd>``.

Both kinds are mapped ``MAP_SHARED | MAP_POPULATE``, so the pages are faulted in once at
mapping time instead of on the first copy into them.
"""
from __future__ import annotations

import ctypes
import mmap
import os

from ...errors import ResourceExhaustedError, UnavailableError

_POPULATE = getattr(mmap, "MAP_POPULATE", 0)


def address_of(buffer: object) -> int:
    """The address of a writable buffer's first byte."""
    return ctypes.addressof(ctypes.c_char.from_buffer(buffer))  # type: ignore[arg-type]


class Segment:
    """``length`` bytes of memfd memory owned by this process, mapped and pre-faulted."""

    def __init__(self, length: int, name: str = "tensorverbs", populate: bool = True) -> None:
        try:
            self.fd = os.memfd_create(name, os.MFD_CLOEXEC)
        except OSError as exc:
            raise ResourceExhaustedError(f"cannot create a {length}-byte memfd: {exc}") from None
        try:
            size = max(length, mmap.PAGESIZE)
            os.ftruncate(self.fd, size)
            self.inode = os.fstat(self.fd).st_ino
            flags = mmap.MAP_SHARED | (_POPULATE if populate else 0)
            self._map = mmap.mmap(self.fd, size, flags=flags)
        except (OSError, ValueError) as exc:
            os.close(self.fd)
            raise ResourceExhaustedError(f"cannot map a {length}-byte segment: {exc}") from None
        self.length = length
        self.addr = address_of(self._map)
        self.view = memoryview(self._map)[:length]

    def close(self) -> None:
        """Unmap and close. Views handed out elsewhere keep the mapping alive (it is
        unmapped when the last of them goes), never dangling."""
        try:
            self.view.release()
            self._map.close()
        except BufferError:
            pass
        os.close(self.fd)


class PeerMapping:
    """One segment of another process, mapped here."""

    def __init__(self, pid: int, fd: int, inode: int, writable: bool = True) -> None:
        path = f"/proc/{pid}/fd/{fd}"
        try:
            f = os.open(path, (os.O_RDWR if writable else os.O_RDONLY) | os.O_CLOEXEC)
        except OSError as exc:
            raise UnavailableError(f"cannot open {path}: {exc.strerror}") from None
        try:
            if os.fstat(f).st_ino != inode:
                raise UnavailableError(f"{path} is no longer the segment it was (inode changed)")
            prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
            self.map = mmap.mmap(f, 0, flags=mmap.MAP_SHARED | _POPULATE, prot=prot)
        except (OSError, ValueError) as exc:
            raise UnavailableError(f"cannot map {path}: {exc}") from None
        finally:
            os.close(f)
        self.inode = inode
        self.addr = address_of(self.map) if writable else 0

    def close(self) -> None:
        try:
            self.map.close()
        except BufferError:
            pass
