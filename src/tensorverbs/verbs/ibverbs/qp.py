"""Reliable-connected queue pairs over pyverbs.

libibverbs leaves a failed completion's opcode undefined, so each queue pair remembers
what it posted: send requests as (wr_id, completion opcode) and receive requests as
wr_id, in posting order. An RC queue completes each queue in order, so the entry a
completion belongs to is the first one with its wr_id; entries before it (unsignaled
sends) are complete too.
"""
from __future__ import annotations

import collections
import ipaddress
import logging
import random
import threading
from typing import TYPE_CHECKING

from ...errors import FailedPreconditionError, InvalidArgumentError
from ..api import CompletionQueue, QueuePair
from ..model import (
    MTU_ENUM, WC_OF_WR, QPEndpoint, QPState, RecvWR, SendWR, WcOpcode, WcStatus,
    WorkCompletion, WrOpcode,
)
from . import _pyverbs
from ._owner import check_open as _check_open
from .selection import ETHERNET, path_mtu

if TYPE_CHECKING:
    from .device import IbverbsContext
    from .memory import IbverbsPD

log = logging.getLogger(__name__)

ACCESS_ALL = 1 | 2 | 4  # LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ: each MR narrows it
IBV_WC_WITH_IMM = 2
IBV_SEND_SIGNALED = 2
MIN_RNR_TIMER = 12  # 0.64 ms before a sender retries a receive-not-ready
RNR_RETRY = 7       # 7 = retry for ever: the protocol keeps receives posted
MAX_SGE = 4
#: rdma_rxe completes a receive too small for the message with LOC_QP_OP_ERR (its copy
#: fails with EINVAL, not ENOSPC); receive SGEs are checked against their regions when
#: posted, so on rxe that status of a receive means a length error
RXE_RECV_LENGTH = ("local length error: the receive buffer is smaller than the message "
                   "(soft-RoCE reports it as LOC_QP_OP_ERR)")

_STATUS_TEXT = {
    WcStatus.LOC_LEN_ERR: "local length error (a receive buffer too small for the message?)",
    WcStatus.LOC_QP_OP_ERR: "local queue-pair operation error",
    WcStatus.LOC_PROT_ERR: "local protection error (an SGE outside its memory region or a wrong lkey)",
    WcStatus.WR_FLUSH_ERR: "flushed: the queue pair is in the error state",
    WcStatus.BAD_RESP_ERR: "bad response from the peer",
    WcStatus.LOC_ACCESS_ERR: "local access error",
    WcStatus.REM_INV_REQ_ERR: "the peer rejected the request as invalid (message too long?)",
    WcStatus.REM_ACCESS_ERR: "remote access error (wrong rkey, address out of range or no permission)",
    WcStatus.REM_OP_ERR: "the peer could not complete the operation",
    WcStatus.RETRY_EXC_ERR: "transport retries exhausted: the peer is unreachable or gone",
    WcStatus.RNR_RETRY_EXC_ERR: "receiver-not-ready retries exhausted: no receive posted at the peer",
    WcStatus.FATAL_ERR: "fatal device error",
    WcStatus.RESP_TIMEOUT_ERR: "response timeout",
    WcStatus.GENERAL_ERR: "general error",
}


def _status(raw: int) -> tuple[WcStatus, str]:
    try:
        status = WcStatus(raw)
    except ValueError:
        return WcStatus.GENERAL_ERR, f"ibverbs status {raw}"
    return status, _STATUS_TEXT.get(status, status.name)


def _make(wc, opcode: WcOpcode, status: WcStatus | None = None,
          text: str | None = None) -> WorkCompletion:
    if status is None:
        status, text = _status(wc.status)
    detail = "" if status == WcStatus.SUCCESS else \
        f"{status.name}: {text}" + (f" (vendor error {wc.vendor_err:#x})" if wc.vendor_err else "")
    return WorkCompletion(
        wr_id=wc.wr_id, status=status, opcode=opcode, qp_num=wc.qp_num, byte_len=wc.byte_len,
        imm_data=wc.imm_data if wc.wc_flags & IBV_WC_WITH_IMM else None,
        vendor_err=wc.vendor_err, detail=detail)


def translate_orphan(wc) -> WorkCompletion:
    """A completion whose queue pair is gone: its opcode is known only on success."""
    try:
        opcode = WcOpcode(wc.opcode)
    except ValueError:
        opcode = WcOpcode.RECV if wc.opcode & 0x80 else WcOpcode.SEND
    return _make(wc, opcode)


def _pop_until(queue: collections.deque, match) -> object | None:
    """Remove entries up to and including the first that ``match`` accepts; return it."""
    if not any(match(e) for e in queue):
        return None
    while queue:
        entry = queue.popleft()
        if match(entry):
            return entry
    return None


def _check_endpoint(remote: QPEndpoint) -> tuple[str, int]:
    """The peer's GID in full form ("" if none) and its RDMA READ depth; raises
    InvalidArgumentError for values no device would take."""
    def bad(what: str) -> InvalidArgumentError:
        return InvalidArgumentError(f"malformed ibverbs endpoint: {what} ({remote})")

    for name, value, limit in (("qp_num", remote.qp_num, 1 << 24), ("psn", remote.psn, 1 << 24),
                               ("lid", remote.lid, 1 << 16)):
        if not isinstance(value, int) or not 0 <= value < limit:
            raise bad(f"{name} {value!r} is not an integer in [0, {limit})")
    if remote.mtu and remote.mtu not in MTU_ENUM:
        raise bad(f"path MTU {remote.mtu!r} is not one of {', '.join(map(str, MTU_ENUM))}")
    rd_atomic = remote.info.get("rd_atomic", 1)
    if not isinstance(rd_atomic, int) or rd_atomic < 1:
        raise bad(f"rd_atomic {rd_atomic!r}")
    try:
        gid = ipaddress.IPv6Address(remote.gid).exploded if remote.gid else ""
    except ValueError:
        raise bad(f"GID {remote.gid!r}") from None
    return gid, rd_atomic


class IbverbsQP(QueuePair):
    """An RC ``ibv_qp``, created in INIT and taken to RTS by :meth:`connect`."""

    def __init__(self, context: "IbverbsContext", pd: "IbverbsPD", send_cq: CompletionQueue,
                 recv_cq: CompletionQueue, max_send_wr: int, max_recv_wr: int) -> None:
        super().__init__(send_cq, recv_cq, max_send_wr, max_recv_wr)
        pv = _pyverbs.load()
        self.context = context
        self.pd = pd
        self.max_sge = min(MAX_SGE, context.device.max_sge)
        cap = pv.qp.QPCap(max_send_wr=max_send_wr, max_recv_wr=max_recv_wr,
                          max_send_sge=self.max_sge, max_recv_sge=self.max_sge)
        init = pv.qp.QPAttr()
        init.qp_access_flags = ACCESS_ALL
        init.port_num = context.port_num
        init.pkey_index = context.config.pkey_index
        what = (f"creating an RC queue pair ({max_send_wr} send, {max_recv_wr} receive requests) "
                f"on {context.device.name} port {context.port_num}")
        with _pyverbs.translated(what):
            # with a QPAttr pyverbs takes the new QP from RESET to INIT (needed to post receives)
            # sq_sig_all=0: only requests marked signaled complete on success
            self._qp = pv.qp.QP(pd._pd, pv.qp.QPInitAttr(
                qp_type=pv.enums.IBV_QPT_RC, scq=send_cq._cq, rcq=recv_cq._cq, cap=cap,
                sq_sig_all=0), init)
        self.qp_num = self._qp.qp_num
        self.psn = random.getrandbits(24)
        self.path_mtu = 0
        self.remote: QPEndpoint | None = None
        self._book_lock = threading.Lock()
        self._sends: collections.deque[tuple[int, WcOpcode]] = collections.deque()
        self._recvs: collections.deque[int] = collections.deque()
        self._register()

    # -- connection ----------------------------------------------------------------------
    def endpoint(self) -> QPEndpoint:
        ctx = self.context
        return QPEndpoint(
            provider="ibverbs", qp_num=self.qp_num, psn=self.psn, lid=ctx.lid, gid=ctx.gid,
            mtu=ctx.mtu, info={"device": ctx.device.name, "port": ctx.port_num,
                               "gid_index": ctx.gid_index, "link_layer": ctx.link_layer,
                               "rd_atomic": ctx.rd_atomic})

    def connect(self, remote: QPEndpoint) -> None:
        _check_open(self)
        if remote.provider != "ibverbs":
            raise InvalidArgumentError(
                f"cannot connect an ibverbs queue pair to a {remote.provider!r} endpoint")
        if self.state != QPState.INIT:
            raise FailedPreconditionError(
                f"queue pair {self.qp_num} is {self.state.name}; connect needs INIT")
        pv = _pyverbs.load()
        ctx, cfg = self.context, self.context.config
        dgid, peer_rd_atomic = _check_endpoint(remote)
        mtu = path_mtu(ctx.mtu, remote.mtu)
        rd_atomic = max(1, min(ctx.rd_atomic, peer_rd_atomic))
        is_global = ctx.link_layer == ETHERNET or not remote.lid
        attr = pv.qp.QPAttr()
        attr.qp_access_flags = ACCESS_ALL
        attr.pkey_index = cfg.pkey_index
        attr.port_num = ctx.port_num
        attr.path_mtu = MTU_ENUM[mtu]
        attr.dest_qp_num = remote.qp_num
        attr.rq_psn = remote.psn & 0xFFFFFF
        attr.sq_psn = self.psn
        attr.max_dest_rd_atomic = ctx.rd_atomic
        attr.max_rd_atomic = rd_atomic
        attr.min_rnr_timer = MIN_RNR_TIMER
        attr.timeout = cfg.timeout
        attr.retry_cnt = cfg.retry_count
        if ctx.is_rxe and cfg.retry_count == 7:
            # rdma_rxe treats retry_cnt 7 as "retry for ever" (like rnr_retry 7), so a dead
            # peer would never fail the request; 6 keeps the bounded meaning
            attr.retry_cnt = 6
        attr.rnr_retry = RNR_RETRY
        with _pyverbs.translated(f"connecting queue pair {self.qp_num} to {remote.gid or remote.lid}"
                                 f"/{remote.qp_num}"):
            if is_global:
                if not dgid:
                    raise InvalidArgumentError(
                        f"the peer endpoint has no GID, which {ctx.link_layer} needs")
                route = pv.addr.GlobalRoute(dgid=pv.addr.GID(dgid), sgid_index=ctx.gid_index,
                                            hop_limit=64, traffic_class=cfg.traffic_class)
                attr.ah_attr = pv.addr.AHAttr(port_num=ctx.port_num, dlid=remote.lid, sl=cfg.sl,
                                              is_global=1, gr=route)
            else:
                attr.ah_attr = pv.addr.AHAttr(port_num=ctx.port_num, dlid=remote.lid, sl=cfg.sl)
            self._qp.to_rts(attr)  # INIT -> RTR -> RTS
        self.path_mtu = mtu
        self.remote = remote
        with self._sq_lock:
            if self.state == QPState.INIT:
                self.state = QPState.RTS

    # -- posting -------------------------------------------------------------------------
    def _check_send(self, wr: SendWR) -> None:
        _check_open(self)
        if len(wr.sg_list) > self.max_sge:
            raise InvalidArgumentError(
                f"send request {wr.wr_id} has {len(wr.sg_list)} SGEs; this queue pair takes "
                f"at most {self.max_sge}")
        if self.state in (QPState.RESET, QPState.INIT):
            raise FailedPreconditionError(
                f"queue pair {self.qp_num} is not connected: call connect() before post_send")

    def _sges(self, wr: SendWR | RecvWR, receive: bool):
        """pyverbs SGEs of ``wr`` and their count. A send SGE outside its (known) region is
        pointed past the end of the PD's fence region, so the device fails it with
        LOC_PROT_ERR before moving a byte (on its own it may send the valid first packets);
        a receive SGE outside its region is refused here."""
        pv = _pyverbs.load()
        out = []
        for s in wr.sg_list:
            addr, lkey = s.addr, s.lkey
            span = self.pd.region_of(lkey)
            if s.length and span is not None and not (
                    span[0] <= s.addr and s.addr + s.length <= span[0] + span[1]):
                if receive:
                    raise InvalidArgumentError(
                        f"receive request {wr.wr_id}: SGE [{s.addr:#x}, +{s.length}) lies outside "
                        f"its memory region [{span[0]:#x}, +{span[1]}) (lkey {lkey:#x})")
                addr, lkey = self.pd.fence()
            out.append(pv.wr.SGE(addr, s.length, lkey))
        return out or [pv.wr.SGE(0, 0, 0)], len(out)  # pyverbs wants one even for none

    def _post_send(self, wr: SendWR) -> None:
        pv = _pyverbs.load()
        sges, count = self._sges(wr, receive=False)
        request = pv.wr.SendWR(wr_id=wr.wr_id, opcode=int(wr.opcode), num_sge=len(sges), sg=sges,
                               imm_data=wr.imm_data & 0xFFFFFFFF,
                               send_flags=IBV_SEND_SIGNALED if wr.signaled else 0)
        request.num_sge = count
        if wr.opcode in (WrOpcode.RDMA_WRITE, WrOpcode.RDMA_WRITE_WITH_IMM, WrOpcode.RDMA_READ):
            request.set_wr_rdma(wr.rkey, wr.remote_addr)
        with self._book_lock:
            if self.closed:
                self.send_cq.push(WorkCompletion(
                    wr.wr_id, WcStatus.WR_FLUSH_ERR, WC_OF_WR[wr.opcode], self.qp_num,
                    detail="queue pair is closed"))
                return
            self._sends.append((wr.wr_id, WC_OF_WR[wr.opcode]))
        try:
            self._qp.post_send(request)  # _close waits for the send-queue lock we run under
        except pv.pyverbs_error.PyverbsError as exc:
            # called under the send-queue lock, possibly from a completion poll: report it as
            # this request's completion rather than raising into a stranger's call
            with self._book_lock:
                self._sends.pop()
            error = _pyverbs.convert(exc, f"posting send request {wr.wr_id} on QP {self.qp_num}")
            self.send_cq.push(WorkCompletion(
                wr.wr_id, WcStatus.LOC_QP_OP_ERR, WC_OF_WR[wr.opcode], self.qp_num,
                detail=str(error)))

    def _post_recv(self, wr: RecvWR) -> None:
        pv = _pyverbs.load()
        if len(wr.sg_list) > self.max_sge:
            raise InvalidArgumentError(
                f"receive request {wr.wr_id} has {len(wr.sg_list)} SGEs; this queue pair "
                f"takes at most {self.max_sge}")
        sges, count = self._sges(wr, receive=True)
        request = pv.wr.RecvWR(wr_id=wr.wr_id, num_sge=len(sges), sg=sges)
        request.num_sge = count
        with self._book_lock:  # held while posting: _close takes it before destroying
            _check_open(self)
            self._recvs.append(wr.wr_id)
            try:
                with _pyverbs.translated(f"posting receive request {wr.wr_id} on QP {self.qp_num}"):
                    self._qp.post_recv(request)
            except BaseException:
                self._recvs.pop()
                raise

    def _recv_outstanding(self) -> int:
        return len(self._recvs)

    # -- completions ---------------------------------------------------------------------
    def _completion(self, wc, cq: CompletionQueue) -> WorkCompletion:
        """The WorkCompletion of a raw pyverbs completion, its opcode restored on errors."""
        with self._book_lock:
            if wc.status == WcStatus.SUCCESS:
                receive = bool(wc.opcode & 0x80)
            elif self.send_cq is not self.recv_cq:
                receive = cq is self.recv_cq
            else:  # one CQ for both queues: the queue that holds this wr_id, ties by the hint
                in_sends = any(w == wc.wr_id for w, _ in self._sends)
                in_recvs = wc.wr_id in self._recvs
                receive = in_recvs if in_sends != in_recvs else bool(wc.opcode & 0x80)
            if receive:
                _pop_until(self._recvs, lambda w: w == wc.wr_id)
                if wc.status == WcStatus.SUCCESS:
                    return _make(wc, WcOpcode(wc.opcode))
                if wc.status == WcStatus.LOC_QP_OP_ERR and self.context.is_rxe:
                    return _make(wc, WcOpcode.RECV, WcStatus.LOC_LEN_ERR, RXE_RECV_LENGTH)
                opcode = WcOpcode.RECV
            else:
                if wc.status == WcStatus.SUCCESS:
                    entry = _pop_until(self._sends, lambda e: e == (wc.wr_id, wc.opcode))
                else:
                    entry = _pop_until(self._sends, lambda e: e[0] == wc.wr_id)
                opcode = entry[1] if entry else translate_orphan(wc).opcode
        return _make(wc, opcode)

    def _hardware_error(self, wc: WorkCompletion) -> None:
        """An error completion: the device moved the queue pair to the error state;
        mirror it so queued sends are flushed instead of posted."""
        if self.state != QPState.ERR:
            self.to_error(wc.detail or wc.status.name)

    def _enter_error(self, reason: str) -> None:
        pv = _pyverbs.load()
        log.debug("queue pair %d enters the error state: %s", self.qp_num, reason)
        attr = pv.qp.QPAttr()
        attr.qp_state = pv.enums.IBV_QPS_ERR
        with self._book_lock:
            if self.closed:
                return
            try:
                self._qp.modify(attr, pv.enums.IBV_QP_STATE)
            except pv.pyverbs_error.PyverbsError as exc:
                log.warning("moving queue pair %d to the error state failed: %s", self.qp_num, exc)

    def _close(self) -> None:
        for cq in (self.send_cq, self.recv_cq):
            cq._qps.pop(self.qp_num, None)
        with self._sq_lock, self._book_lock, \
                _pyverbs.translated(f"destroying queue pair {self.qp_num}"):
            self._qp.close()

