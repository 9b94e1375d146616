"""What this process knows of a peer process's memory on the same host: its key table
and the segments mapped so far, shared by every queue pair to that process."""
from __future__ import annotations

import threading

from ...errors import UnavailableError
from ..model import Access
from .keytable import Entry, KeyTableView
from .segments import PeerMapping


class RemoteAccessError(Exception):
    """A one-sided access the peer's key table does not allow."""


class PeerMemory:
    """Resolve (rkey, address, length) of a peer into an address mapped here."""

    def __init__(self, pid: int, table_fd: int, table_inode: int) -> None:
        self.pid = pid
        self.table_inode = table_inode
        self.table = KeyTableView(pid, table_fd, table_inode)
        self._segments: dict[int, PeerMapping] = {}  # peer fd -> mapping
        self._retired: list[PeerMapping] = []
        self._lock = threading.Lock()
        self.users = 0

    def resolve(self, rkey: int, addr: int, length: int, need: int) -> int | None:
        """The local address of the peer's ``addr``; None when the region is not shared
        memory (the caller then goes through the stream). Raises RemoteAccessError."""
        entry = self.table.lookup(rkey)
        if entry is None:
            raise RemoteAccessError(f"rkey {rkey:#x} is not registered at the peer")
        if not (entry.addr <= addr and addr + length <= entry.addr + entry.length):
            raise RemoteAccessError(
                f"[{addr:#x}, +{length}) is outside the region of rkey {rkey:#x} "
                f"([{entry.addr:#x}, +{entry.length}))")
        if not entry.access & need:
            raise RemoteAccessError(
                f"the region of rkey {rkey:#x} does not allow {Access(need).name}")
        if entry.seg_fd < 0:
            return None
        mapping = self._mapping(entry)
        if mapping is None:
            return None
        return mapping.addr + entry.seg_offset + (addr - entry.addr)

    def _mapping(self, entry: Entry) -> PeerMapping | None:
        mapping = self._segments.get(entry.seg_fd)
        if mapping is not None and mapping.inode == entry.seg_inode:
            return mapping
        with self._lock:
            mapping = self._segments.get(entry.seg_fd)
            if mapping is not None and mapping.inode == entry.seg_inode:
                return mapping
            if mapping is not None:
                # the peer reused the fd for another segment; another thread may still be
                # copying through the old mapping, so it is unmapped only at close()
                self._retired.append(mapping)
            try:
                mapping = PeerMapping(self.pid, entry.seg_fd, entry.seg_inode)
            except UnavailableError:
                return None
            self._segments[entry.seg_fd] = mapping
            return mapping

    def close(self) -> None:
        with self._lock:
            for mapping in [*self._segments.values(), *self._retired]:
                mapping.close()
            self._segments.clear()
            self._retired.clear()
        self.table.close()
