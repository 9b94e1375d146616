"""An open RDMA device: the port, GID and queue-pair settings every object on it uses."""
from __future__ import annotations

from ...errors import InvalidArgumentError
from ..api import CompletionQueue, Context, ProtectionDomain
from ..config import RdmaConfig
from . import _pyverbs
from ._owner import Owner, check_open
from .cq import IbverbsCQ
from .discovery import open_device
from .memory import IbverbsPD
from .qp import IbverbsQP
from .selection import Choice

#: outstanding RDMA READs a queue pair accepts and issues (bounded by the device)
RD_ATOMIC = 16


class IbverbsContext(Owner, Context):
    """``ibv_context`` on the chosen device and port.

    ``gid``/``gid_index``/``gid_type``, ``lid``, ``link_layer`` and ``mtu`` (bytes, the
    local side of the path MTU) describe this end; every queue pair's endpoint carries them.
    """

    provider = "ibverbs"

    def __init__(self, ctx, choice: Choice, config: RdmaConfig) -> None:
        self._ctx = ctx
        self._init_owner()
        self.config = config
        self.device = choice.device
        self.port_num = choice.port.port_num
        self.link_layer = choice.port.link_layer
        self.gid_index = choice.gid_index
        self.gid = choice.gid
        self.gid_type = choice.gid_type
        self.mtu = choice.mtu
        with _pyverbs.translated(f"querying {choice.device.name}"):
            dev = ctx.query_device()
            port = ctx.query_port(self.port_num)
        self.lid = port.lid
        #: soft-RoCE (rdma_rxe) reports vendor 0xFFFFFF; the provider works around its quirks
        self.is_rxe = dev.vendor_id == 0xFFFFFF
        self.max_cqe = dev.max_cqe
        self.rd_atomic = max(1, min(RD_ATOMIC, dev.max_qp_rd_atom, dev.max_qp_init_rd_atom))
        where = f"{self.device.name} port {self.port_num}"
        if config.pkey_index >= port.pkey_tbl_len:
            raise InvalidArgumentError(
                f"RDMA_QP_PKEY_INDEX={config.pkey_index} is out of range: the P_Key table of "
                f"{where} has {port.pkey_tbl_len} entries")
        if config.queue_depth > dev.max_qp_wr:
            raise InvalidArgumentError(
                f"RDMA_QP_QUEUE_DEPTH={config.queue_depth} exceeds max_qp_wr {dev.max_qp_wr} "
                f"of {self.device.name}")

    def alloc_pd(self) -> ProtectionDomain:
        check_open(self)
        return self.own(IbverbsPD(self))

    def create_cq(self, depth: int) -> CompletionQueue:
        check_open(self)
        return self.own(IbverbsCQ(self, depth))

    def create_qp(self, pd: ProtectionDomain, send_cq: CompletionQueue, recv_cq: CompletionQueue,
                  max_send_wr: int, max_recv_wr: int) -> IbverbsQP:
        check_open(self)
        for what, obj, cls in (("protection domain", pd, IbverbsPD),
                               ("send CQ", send_cq, IbverbsCQ), ("receive CQ", recv_cq, IbverbsCQ)):
            if not isinstance(obj, cls) or obj.context is not self:
                raise InvalidArgumentError(f"the {what} does not belong to this ibverbs context")
            check_open(obj)
        for what, value in (("max_send_wr", max_send_wr), ("max_recv_wr", max_recv_wr)):
            if not 1 <= value <= self.device.max_qp_wr:
                raise InvalidArgumentError(
                    f"{what}={value} is outside [1, {self.device.max_qp_wr}] (max_qp_wr of "
                    f"{self.device.name})")
        return self.own(pd.own(IbverbsQP(self, pd, send_cq, recv_cq, max_send_wr, max_recv_wr)))

    def _close(self) -> None:
        self.close_owned()  # newest first: queue pairs before their CQs, MRs before their PD
        with _pyverbs.translated(f"closing {self.device.name}"):
            self._ctx.close()  # pyverbs closes what was made on it first


def open_context(choice: Choice, config: RdmaConfig) -> IbverbsContext:
    """Open the chosen device as a context configured by ``config``."""
    ctx = open_device(choice.device.name)
    try:
        return IbverbsContext(ctx, choice, config)
    except BaseException:
        ctx.close()
        raise
