"""The rkey table: which remote keys are valid, for what access, over which memory.

A context keeps its table in a memfd segment of fixed-size entries that peers on the same
host map read-only, so a writer validates a one-sided access itself, before copying.
Entry: rkey, access, segment fd (-1: not shared memory), pad, segment inode, offset of
the region in the segment, region address, region length. Registration writes the rkey
field last; deregistration zeroes it first; a reader re-reads it after the entry, so it
never accepts a half-written entry.
"""
from __future__ import annotations

import secrets
import struct
from typing import NamedTuple

from ...errors import ResourceExhaustedError
from .segments import PeerMapping, Segment

SLOT_BITS = 16
SLOT_MASK = (1 << SLOT_BITS) - 1
_ENTRY = struct.Struct("<IIiIQQQQ")
_ENTRY_SIZE = 64
_RKEY = struct.Struct("<I")


class Entry(NamedTuple):
    """One registered region as a peer sees it."""

    rkey: int
    access: int
    seg_fd: int
    pad: int
    seg_inode: int
    seg_offset: int
    addr: int
    length: int


class KeyTable:
    """This context's table; hands out keys (slot in the low bits, random high bits)."""

    def __init__(self, slots: int = 1 << SLOT_BITS) -> None:
        self.segment = Segment(slots * _ENTRY_SIZE, "tensorverbs-keys", populate=False)
        self._free = list(range(slots - 1, -1, -1))

    def add(self, access: int, seg_fd: int, seg_inode: int, seg_offset: int,
            addr: int, length: int) -> int:
        """Publish a region; returns its key."""
        if not self._free:
            raise ResourceExhaustedError("every key of the memory-region table is in use")
        slot = self._free.pop()
        rkey = slot | (secrets.randbelow(0xFFFF) + 1) << SLOT_BITS
        off = slot * _ENTRY_SIZE
        _ENTRY.pack_into(self.segment.view, off, 0, access, seg_fd, 0, seg_inode, seg_offset,
                         addr, length)
        _RKEY.pack_into(self.segment.view, off, rkey)
        return rkey

    def remove(self, rkey: int) -> None:
        slot = rkey & SLOT_MASK
        _RKEY.pack_into(self.segment.view, slot * _ENTRY_SIZE, 0)
        self._free.append(slot)

    def close(self) -> None:
        self.segment.close()


class KeyTableView:
    """A peer's table, mapped read-only."""

    def __init__(self, pid: int, fd: int, inode: int) -> None:
        self._mapping = PeerMapping(pid, fd, inode, writable=False)
        self._map = self._mapping.map

    def lookup(self, rkey: int) -> Entry | None:
        """The entry of ``rkey``, or None when no region has that key."""
        off = (rkey & SLOT_MASK) * _ENTRY_SIZE
        if rkey == 0 or off + _ENTRY_SIZE > len(self._map):
            return None
        fields = _ENTRY.unpack_from(self._map, off)
        if fields[0] != rkey or _RKEY.unpack_from(self._map, off)[0] != rkey:
            return None
        return Entry._make(fields)

    def close(self) -> None:
        self._mapping.close()
