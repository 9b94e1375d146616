"""The soft context (an open "soft0" device), its protection domains and memory regions."""
from __future__ import annotations

import itertools
import logging
import os
import secrets
import socket
import threading
from typing import Any

import numpy as np

from ...errors import InvalidArgumentError, UnavailableError
from ..api import Context, MemoryRegion, ProtectionDomain
from ..config import RdmaConfig
from ..model import Access, DeviceAttr
from .cq import SoftCQ
from .engine import Engine
from .host import HostIdentity
from .keytable import KeyTable
from .listener import Listener, dial
from .peer import PeerMemory
from .qp import SoftQP
from .segments import Segment, address_of

log = logging.getLogger(__name__)


class SoftMR(MemoryRegion):
    """A registered region: shared memory of its own (``alloc_mr``) or a caller's buffer."""

    def __init__(self, pd: "SoftPD", buf: memoryview, addr: int, access: Access,
                 segment: Segment | None) -> None:
        self.pd = pd
        self.buf = buf
        self.addr = addr
        self.length = len(buf)
        self.access = access
        self.access_bits = int(access)
        self._segment = segment
        ctx = pd.ctx
        self.lkey = self.rkey = ctx.keys.add(
            int(access), segment.fd if segment else -1, segment.inode if segment else 0, 0,
            addr, self.length)
        ctx.mrs[self.lkey] = self
        pd.mrs.add(self)

    @property
    def shared(self) -> bool:
        """Whether peers on this host reach the region through shared memory."""
        return self._segment is not None

    def _close(self) -> None:
        ctx = self.pd.ctx
        ctx.mrs.pop(self.lkey, None)
        ctx.keys.remove(self.rkey)
        self.pd.mrs.discard(self)
        if self._segment is not None:
            self._segment.close()


class SoftPD(ProtectionDomain):
    """A protection domain: the scope of this context's registrations."""

    def __init__(self, ctx: "SoftContext") -> None:
        self.ctx = ctx
        self.mrs: set[SoftMR] = set()

    def reg_mr(self, buffer: Any, access: Access) -> SoftMR:
        access = _check_access(access)
        try:
            view = memoryview(buffer)
        except TypeError:
            raise InvalidArgumentError(
                f"cannot register a {type(buffer).__name__}: not a buffer") from None
        if not view.c_contiguous:
            raise InvalidArgumentError("only contiguous buffers can be registered")
        if view.readonly and access & (Access.LOCAL_WRITE | Access.REMOTE_WRITE):
            raise InvalidArgumentError("a read-only buffer cannot be registered with write access")
        view = view.cast("B")
        return SoftMR(self, view, _address(view), access, None)

    def alloc_mr(self, length: int, access: Access) -> SoftMR:
        access = _check_access(access)
        if length < 0:
            raise InvalidArgumentError(f"cannot allocate a region of {length} bytes")
        segment = Segment(length)
        return SoftMR(self, segment.view, segment.addr, access, segment)

    def _close(self) -> None:
        for mr in list(self.mrs):
            mr.close()


def _address(view: memoryview) -> int:
    if not len(view):
        return 0
    return address_of(view) if not view.readonly else np.frombuffer(view, np.uint8).ctypes.data


def _check_access(access: Access) -> Access:
    access = Access(access)
    if access & Access.REMOTE_WRITE and not access & Access.LOCAL_WRITE:
        raise InvalidArgumentError("REMOTE_WRITE access needs LOCAL_WRITE too (as in libibverbs)")
    return access


class SoftContext(Context):
    """An open soft device: its listener, key table, engine and peers' memory."""

    provider = "soft"

    def __init__(self, device: DeviceAttr, config: RdmaConfig, listen_host: str) -> None:
        self.device = device
        self.config = config
        self.identity = HostIdentity.current()
        self.engine = Engine()
        self.keys = KeyTable()
        self.mrs: dict[int, SoftMR] = {}
        self._lock = threading.Lock()
        self._qps: dict[bytes, SoftQP] = {}
        self._peers: dict[tuple[int, int], PeerMemory] = {}
        self._children: list[Any] = []
        self._qp_nums = itertools.count(secrets.randbelow(1 << 22) + 1)
        self.listener = Listener(listen_host, self._on_dial)

    # -- verbs objects -------------------------------------------------------------------
    def alloc_pd(self) -> SoftPD:
        return self._own(SoftPD(self))

    def create_cq(self, depth: int) -> SoftCQ:
        return self._own(SoftCQ(self.engine, depth))

    def create_qp(self, pd: ProtectionDomain, send_cq: Any, recv_cq: Any, max_send_wr: int,
                  max_recv_wr: int) -> SoftQP:
        if not (isinstance(pd, SoftPD) and pd.ctx is self):
            raise InvalidArgumentError("the protection domain belongs to another context")
        for cq in (send_cq, recv_cq):
            if not (isinstance(cq, SoftCQ) and cq.engine is self.engine):
                raise InvalidArgumentError("the completion queue belongs to another context")
        if max_send_wr < 1 or max_recv_wr < 1:
            raise InvalidArgumentError("queue depths must be at least 1")
        qp = SoftQP(self, pd, send_cq, recv_cq, max_send_wr, max_recv_wr)  # type: ignore[arg-type]
        with self._lock:
            self._qps[qp.token] = qp
        return self._own(qp)

    def _own(self, obj: Any) -> Any:
        with self._lock:
            self._children.append(obj)
        return obj

    def new_qp_num(self) -> int:
        return next(self._qp_nums) & 0xFFFFFF

    def forget_qp(self, qp: SoftQP) -> None:
        with self._lock:
            self._qps.pop(qp.token, None)

    # -- connections ---------------------------------------------------------------------
    def contact(self) -> dict[str, Any]:
        """What a peer needs to reach this context (part of every endpoint)."""
        seg = self.keys.segment
        return {"host": self.identity.to_json(), "pid": os.getpid(),
                "same_host": self.config.same_host, "unix": self.listener.unix_name,
                "tcp": list(self.listener.address), "keys": [seg.fd, seg.inode]}

    def dial(self, info: dict[str, Any], local: bool, target: bytes, own: bytes) -> socket.socket:
        return dial(info["unix"] if local else None, tuple(info["tcp"]), target, own)  # type: ignore[arg-type]

    def _on_dial(self, target: bytes, dialer: bytes, sock: socket.socket) -> None:
        qp = self._qps.get(target)
        if qp is None or not qp.attach(sock, dialer):
            sock.close()

    def acquire_peer(self, info: dict[str, Any]) -> PeerMemory | None:
        """The peer's memory, mapped once per peer process; None when it cannot be
        mapped (its regions are then reached through the stream)."""
        pid, (fd, inode) = int(info["pid"]), info["keys"]
        with self._lock:
            peer = self._peers.get((pid, inode))
            if peer is None:
                try:
                    peer = PeerMemory(pid, fd, inode)
                except UnavailableError as exc:
                    log.info("soft verbs: peer %d's memory is not mappable (%s); using the stream",
                             pid, exc)
                    return None
                self._peers[(pid, inode)] = peer
            peer.users += 1
            return peer

    def release_peer(self, peer: PeerMemory) -> None:
        with self._lock:
            peer.users -= 1
            if peer.users:
                return
            self._peers.pop((peer.pid, peer.table_inode), None)
        peer.close()

    def _close(self) -> None:
        self.listener.close()
        with self._lock:
            children, self._children = self._children, []
        for obj in sorted(children, key=lambda o: not isinstance(o, SoftQP)):  # QPs first
            obj.close()
        self.engine.close()
        self.keys.close()
