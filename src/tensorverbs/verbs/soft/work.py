"""Work requests between posting and completion, and the checks of registered memory
they go through."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..model import WC_OF_WR, Access, SendWR, WcOpcode, WcStatus, WorkCompletion

if TYPE_CHECKING:
    from .context import SoftMR, SoftPD

# access bits as plain ints: IntFlag arithmetic is slow on the data path
LOCAL_WRITE, REMOTE_WRITE, REMOTE_READ = (int(a) for a in (
    Access.LOCAL_WRITE, Access.REMOTE_WRITE, Access.REMOTE_READ))


class VerbsError(Exception):
    """A work request fails with ``status``."""

    def __init__(self, status: WcStatus, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


class PendingSend:
    """A send work request between posting and completion."""

    __slots__ = ("wr_id", "opcode", "signaled", "status", "byte_len", "detail", "sinks")

    def __init__(self, wr: SendWR) -> None:
        self.wr_id = wr.wr_id
        self.opcode = WC_OF_WR.get(wr.opcode, WcOpcode.SEND)
        self.signaled = wr.signaled
        self.status: WcStatus | None = None
        self.byte_len = 0
        self.detail = ""
        self.sinks: list[memoryview] = []

    def finish(self, status: WcStatus = WcStatus.SUCCESS, detail: str = "") -> None:
        if self.status is None:
            self.status, self.detail = status, detail

    def completion(self, qp_num: int) -> WorkCompletion:
        return WorkCompletion(self.wr_id, self.status, self.opcode, qp_num,  # type: ignore[arg-type]
                              byte_len=self.byte_len, detail=self.detail)


class PostedRecv:
    """A posted receive: its destinations, or why it cannot take data."""

    __slots__ = ("wr_id", "views", "capacity", "error")

    def __init__(self, wr_id: int, views: list[memoryview], error: VerbsError | None) -> None:
        self.wr_id = wr_id
        self.views = views
        self.capacity = sum(len(v) for v in views)
        self.error = error

    def check(self, length: int) -> None:
        if self.error is not None:
            raise self.error
        if length > self.capacity:
            raise VerbsError(WcStatus.LOC_LEN_ERR,
                              f"a {length}-byte message does not fit the {self.capacity}-byte receive")

    def scatter(self, length: int) -> list[memoryview]:
        out = []
        for view in self.views:
            if length <= 0:
                break
            out.append(view[:length])
            length -= len(out[-1])
        return out


def check_region(mr: "SoftMR | None", pd: "SoftPD", key: int, addr: int, length: int,
                 need: int, status: WcStatus) -> memoryview:
    """The bytes [addr, addr + length) of region ``mr`` (found by ``key``) if this
    protection domain may use them with ``need``; raises VerbsError(status) otherwise."""
    if mr is None or mr.pd is not pd:
        raise VerbsError(status, f"key {key:#x} is not a region of this protection domain")
    offset = addr - mr.addr
    if offset < 0 or offset + length > mr.length:
        raise VerbsError(status, f"[{addr:#x}, +{length}) is outside the region of key {key:#x} "
                                  f"([{mr.addr:#x}, +{mr.length}))")
    if need and not mr.access_bits & need:
        raise VerbsError(status, f"the region of key {key:#x} does not allow {Access(need).name}")
    return mr.buf[offset:offset + length]
