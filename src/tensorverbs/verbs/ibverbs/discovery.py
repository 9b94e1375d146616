"""The RDMA devices pyverbs sees, described as :class:`DeviceAttr` (what ``ibv_devinfo`` shows)."""
from __future__ import annotations

import logging
import threading

from ...errors import TensorverbsError
from ..model import DeviceAttr, PortAttr
from . import _pyverbs

log = logging.getLogger(__name__)

#: opening a device and creating a completion channel both make "[infinibandevent]" file
#: descriptors; the CQ finds its channel's descriptor by difference, under this lock
FD_LOCK = threading.Lock()

PORT_STATES = {0: "NOP", 1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE", 5: "ACTIVE_DEFER"}
LINK_LAYERS = {0: "InfiniBand", 1: "InfiniBand", 2: "Ethernet"}
MTU_BYTES = {1: 256, 2: 512, 3: 1024, 4: 2048, 5: 4096}
#: ``ibv_gid_type`` as ibv_query_gid_table reports it
GID_TYPES = {0: "IB", 1: "RoCEv1", 2: "RoCEv2"}
_ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"


def device_names() -> list[str]:
    """Names of the devices libibverbs lists (empty when the kernel has none)."""
    pv = _pyverbs.load()
    with _pyverbs.translated("listing RDMA devices"):
        return [d.name.decode() if isinstance(d.name, bytes) else str(d.name)
                for d in pv.device.get_device_list()]


def open_device(name: str):
    """An open pyverbs ``Context`` for the device ``name``."""
    pv = _pyverbs.load()
    with FD_LOCK, _pyverbs.translated(f"opening RDMA device {name}"):
        return pv.device.Context(name=name)


def _gids(ctx, port_num: int, link_layer: str, table) -> list[tuple[int, str, str]]:
    if table is not None:
        return sorted((e.gid_index, e.gid_str(), GID_TYPES.get(e.gid_type, str(e.gid_type)))
                      for e in table if e.port_num == port_num)
    # no ibv_query_gid_table: ask entry by entry (the sysfs type says RoCEv2 or "IB/RoCEv1")
    out = []
    attr = ctx.query_port(port_num)
    for index in range(min(attr.gid_tbl_len, 256)):
        try:
            gid = str(ctx.query_gid(port_num, index))
        except _pyverbs.load().pyverbs_error.PyverbsError:
            break
        if gid == _ZERO_GID:
            continue
        try:
            sysfs_type = ctx.query_gid_type(port_num, index)
        except _pyverbs.load().pyverbs_error.PyverbsError:
            sysfs_type = 0
        gid_type = "RoCEv2" if sysfs_type == 1 else "RoCEv1" if link_layer == "Ethernet" else "IB"
        out.append((index, gid, gid_type))
    return out


def describe(ctx, name: str) -> DeviceAttr:
    """The limits, ports and GIDs of the open device ``ctx``."""
    with _pyverbs.translated(f"querying RDMA device {name}"):
        dev = ctx.query_device()
        ports = [ctx.query_port(p) for p in range(1, dev.phys_port_cnt + 1)]
        try:
            table = ctx.query_gid_table(sum(p.gid_tbl_len for p in ports))
        except (AttributeError, _pyverbs.load().pyverbs_error.PyverbsError):
            table = None
        port_attrs = []
        for num, port in enumerate(ports, start=1):
            link = LINK_LAYERS.get(port.link_layer, str(port.link_layer))
            port_attrs.append(PortAttr(
                port_num=num,
                state=PORT_STATES.get(port.state, str(port.state)),
                active_mtu=MTU_BYTES.get(port.active_mtu, 0),
                max_mtu=MTU_BYTES.get(port.max_mtu, 0),
                link_layer=link,
                gids=_gids(ctx, num, link, table),
            ))
        return DeviceAttr(
            name=name,
            provider="ibverbs",
            max_qp_wr=dev.max_qp_wr,
            max_sge=dev.max_sge,
            max_msg_sz=min((p.max_msg_sz for p in ports), default=0),
            max_mr_size=dev.max_mr_size,
            ports=port_attrs,
            detail=f"fw {dev.fw_version or '-'}, vendor {dev.vendor_id:#x}:{dev.vendor_part_id}, "
                   f"max_cqe {dev.max_cqe}, max_qp_rd_atom {dev.max_qp_rd_atom}",
        )


def scan() -> list[DeviceAttr]:
    """Every device with its ports; a device that cannot be opened is listed with
    the reason in ``detail`` and no ports."""
    out = []
    for name in device_names():
        try:
            ctx = open_device(name)
        except TensorverbsError as exc:
            out.append(DeviceAttr(name, "ibverbs", 0, 0, 0, 0, detail=f"cannot open: {exc}"))
            continue
        try:
            out.append(describe(ctx, name))
        except TensorverbsError as exc:
            out.append(DeviceAttr(name, "ibverbs", 0, 0, 0, 0, detail=f"cannot query: {exc}"))
        finally:
            ctx.close()
    return out
