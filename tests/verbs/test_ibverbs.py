"""The ibverbs provider.

Without pyverbs or RDMA devices (a plain CI machine) the provider must say why it is
unavailable, and its device/port/GID/MTU selection is checked on described devices.
With devices (the soft-RoCE guest of tools/rxe-lab.sh: rxe0 and rxe1 on a veth pair)
the tests move real bytes between two devices.

TENSORVERBS_TEST_MAX_BYTES caps transfer sizes (the emulated guest moves tens of MB/s).
"""
from __future__ import annotations

import errno
import os
import time

import numpy as np
import pytest

from tensorverbs.errors import (
    FailedPreconditionError, InvalidArgumentError, NotFoundError, ResourceExhaustedError,
    UnavailableError,
)
from tensorverbs.verbs import (
    SGE, Access, DeviceAttr, PortAttr, QPEndpoint, QPState, RdmaConfig, RecvWR, SendWR, WcOpcode,
    WcStatus, WrOpcode, choose_provider, get_provider,
)
from tensorverbs.verbs.ibverbs import _pyverbs
from tensorverbs.verbs.ibverbs.selection import choose, path_mtu

from verbs_pair import Waiting

MAX_BYTES = int(os.environ.get("TENSORVERBS_TEST_MAX_BYTES", str(4 << 20)))
TIMEOUT = 30.0


# ------------------------------------------------------------------ without RDMA devices
def test_unavailable_without_pyverbs_says_why():
    if _pyverbs.missing_reason() is None:
        pytest.skip("pyverbs is installed here")
    provider = get_provider("ibverbs")
    assert provider.availability() == (False, "pyverbs is not installed")
    assert provider.devices() == []
    with pytest.raises(UnavailableError, match="pyverbs is not installed"):
        provider.open(RdmaConfig())
    with pytest.raises(UnavailableError, match="TENSORVERBS_PROVIDER=ibverbs.*pyverbs"):
        choose_provider(RdmaConfig(provider="ibverbs"))


def _port(num=1, state="ACTIVE", mtu=1024, link="Ethernet", gids=None):
    if gids is None:
        gids = [(0, "fe80:0000:0000:0000:0000:00ff:fe00:0001", "RoCEv2"),
                (1, "fe80:0000:0000:0000:0000:00ff:fe00:0001", "RoCEv1"),
                (2, "0000:0000:0000:0000:0000:ffff:0a00:0001", "RoCEv2"),
                (3, "0000:0000:0000:0000:0000:ffff:0a00:0001", "RoCEv1")]
    return PortAttr(num, state, mtu, 4096, link, gids)


def _dev(name, *ports):
    return DeviceAttr(name, "ibverbs", 16384, 30, 1 << 30, 1 << 40, list(ports))


DEVICES = [_dev("mlx5_0", _port(state="DOWN")),
           _dev("mlx5_1", _port(1, state="DOWN"), _port(2, mtu=4096))]


def test_default_choice_is_first_active_port_with_routable_rocev2_gid():
    c = choose(DEVICES, RdmaConfig())
    assert (c.device.name, c.port.port_num, c.gid_index, c.gid_type, c.mtu) == \
        ("mlx5_1", 2, 2, "RoCEv2", 4096)


def test_infiniband_port_takes_gid_zero():
    ib = _dev("ib0", _port(link="InfiniBand", mtu=2048,
                           gids=[(0, "fe80:0000:0000:0000:0002:c903:0001:0001", "IB")]))
    c = choose([ib], RdmaConfig())
    assert (c.gid_index, c.gid_type, c.mtu) == (0, "IB", 2048)


@pytest.mark.parametrize("env, error, words", [
    ({"RDMA_DEVICE": "nosuch0"}, NotFoundError, ["RDMA_DEVICE='nosuch0'", "mlx5_0, mlx5_1"]),
    ({"RDMA_DEVICE": "mlx5_0"}, InvalidArgumentError, ["mlx5_0", "no active port", "DOWN"]),
    ({"RDMA_DEVICE": "mlx5_1", "RDMA_DEVICE_PORT": "3"}, NotFoundError,
     ["RDMA_DEVICE_PORT=3", "its ports: 1, 2"]),
    ({"RDMA_DEVICE": "mlx5_1", "RDMA_DEVICE_PORT": "1"}, InvalidArgumentError,
     ["RDMA_DEVICE_PORT=1", "DOWN", "active ports: 2"]),
    ({"RDMA_GID_INDEX": "7"}, InvalidArgumentError, ["RDMA_GID_INDEX=7", "0 (RoCEv2", "3 (RoCEv1"]),
    ({"RDMA_DEVICE": "mlx5_1", "RDMA_QP_MTU": "4096", "RDMA_DEVICE_PORT": "2"}, None, []),
    ({"RDMA_DEVICE_PORT": "9"}, NotFoundError, ["RDMA_DEVICE_PORT=9"]),
])
def test_configuration_errors_name_variable_value_and_what_exists(env, error, words):
    config = RdmaConfig.from_env(env)
    if error is None:
        assert choose(DEVICES, config).mtu == 4096
        return
    with pytest.raises(error) as info:
        choose(DEVICES, config)
    for word in words:
        assert word in str(info.value)


def test_mtu_setting_is_capped_by_the_active_mtu():
    one = [_dev("rxe0", _port(mtu=1024))]
    assert choose(one, RdmaConfig(mtu=512)).mtu == 512
    with pytest.raises(InvalidArgumentError, match="RDMA_QP_MTU=4096 exceeds the active MTU 1024"):
        choose(one, RdmaConfig(mtu=4096))


def test_no_devices_or_no_active_port_is_unavailable():
    with pytest.raises(UnavailableError, match="no RDMA devices"):
        choose([], RdmaConfig())
    with pytest.raises(UnavailableError, match="no RDMA device has an active port: mlx5_0 port 1 DOWN"):
        choose(DEVICES[:1], RdmaConfig())


def test_path_mtu_is_the_smaller_end():
    assert path_mtu(4096, 1024) == 1024
    assert path_mtu(1024, 0) == 1024


def test_pyverbs_errors_become_status_errors_with_errno():
    class FakeRDMAError(Exception):
        error_code = errno.ENOMEM

    err = _pyverbs.convert(FakeRDMAError("Failed to register a MR"), "registering 1 GiB")
    assert isinstance(err, ResourceExhaustedError)
    assert "errno 12 ENOMEM" in str(err) and "registering 1 GiB" in str(err)
    assert "ulimit -l" in str(err)
    FakeRDMAError.error_code = errno.EINVAL
    assert isinstance(_pyverbs.convert(FakeRDMAError("x"), "y"), InvalidArgumentError)


# ---------------------------------------------------------------------- on RDMA devices
@pytest.fixture(scope="module")
def provider():
    p = get_provider("ibverbs")
    ok, reason = p.availability()
    if not ok:
        pytest.skip(f"ibverbs provider unavailable: {reason}")
    return p


def _two_devices(provider) -> tuple[str, str]:
    names = [d.name for d in provider.devices() if any(p.state == "ACTIVE" for p in d.ports)]
    return names[0], names[1 if len(names) > 1 else 0]


class End:
    """One side of a connection: context, PD, one CQ for both queues, QP."""

    def __init__(self, provider, device: str, max_send_wr=16, max_recv_wr=16, **cfg):
        self.ctx = provider.open(RdmaConfig(provider="ibverbs", device=device, **cfg))
        self.pd = self.ctx.alloc_pd()
        self.cq = self.ctx.create_cq(64)
        self.qp = self.ctx.create_qp(self.pd, self.cq, self.cq, max_send_wr, max_recv_wr)

    def wait(self, n=1, timeout=TIMEOUT):
        out, deadline = [], time.monotonic() + timeout
        while len(out) < n and time.monotonic() < deadline:
            out += self.cq.wait(timeout=deadline - time.monotonic())
        assert len(out) >= n, f"only {len(out)} of {n} completions within {timeout}s"
        return out

    def close(self):
        self.ctx.close()


@pytest.fixture
def pair(provider):
    a_dev, b_dev = _two_devices(provider)
    a, b = End(provider, a_dev), End(provider, b_dev)
    a.qp.connect(b.qp.endpoint())
    b.qp.connect(a.qp.endpoint())
    yield a, b
    a.close()
    b.close()


def test_devices_report_ports_mtu_and_gids(provider):
    devices = provider.devices()
    assert devices and all(d.provider == "ibverbs" for d in devices)
    port = devices[0].ports[0]
    assert port.state == "ACTIVE" and port.active_mtu in (256, 512, 1024, 2048, 4096)
    assert port.gids and {t for _, _, t in port.gids} <= {"RoCEv1", "RoCEv2", "IB"}
    assert devices[0].max_msg_sz > 0 and devices[0].max_qp_wr > 0


@pytest.mark.parametrize("cfg, error, word", [
    ({"device": "nosuch0"}, NotFoundError, "RDMA_DEVICE='nosuch0' does not exist"),
    ({"port": 7}, NotFoundError, "RDMA_DEVICE_PORT=7"),
    ({"gid_index": 200}, InvalidArgumentError, "RDMA_GID_INDEX=200 is out of range"),
    ({"mtu": 4096}, InvalidArgumentError, "RDMA_QP_MTU=4096 exceeds"),
    ({"pkey_index": 60000}, InvalidArgumentError, "RDMA_QP_PKEY_INDEX=60000"),
    ({}, None, ""),
])
def test_open_rejects_bad_settings(provider, cfg, error, word):
    if cfg.get("mtu") and provider.devices()[0].ports[0].active_mtu >= 4096:
        pytest.skip("the port's active MTU is 4096 already")
    if error is None:
        provider.open(RdmaConfig(**cfg)).close()
        return
    with pytest.raises(error, match=word):
        provider.open(RdmaConfig(**cfg))


def test_write_with_imm_moves_bytes_between_devices(pair):
    a, b = pair
    for size in sorted({1, 4096, 65536, MAX_BYTES}):
        src = np.frombuffer(os.urandom(size), dtype=np.uint8).copy()
        smr = a.pd.reg_mr(src, Access.LOCAL_WRITE)
        assert smr.addr == src.ctypes.data  # registered in place, no copy
        dmr = b.pd.alloc_mr(size, Access.all())
        b.qp.post_recv(RecvWR(wr_id=size))
        a.qp.post_send(SendWR(7, WrOpcode.RDMA_WRITE_WITH_IMM, [smr.sge()],
                              remote_addr=dmr.addr, rkey=dmr.rkey, imm_data=0xCAFE0000 + size % 997))
        [sent] = a.wait()
        [got] = b.wait()
        assert sent.ok and sent.opcode == WcOpcode.RDMA_WRITE and sent.wr_id == 7
        assert got.ok and got.opcode == WcOpcode.RECV_RDMA_WITH_IMM and got.wr_id == size
        assert got.imm_data == 0xCAFE0000 + size % 997 and got.byte_len == size
        assert bytes(dmr.buf) == src.tobytes()
        smr.close()
        dmr.close()


def test_send_into_posted_receive_and_read_back(pair):
    a, b = pair
    mra, mrb = a.pd.alloc_mr(8192, Access.all()), b.pd.alloc_mr(8192, Access.all())
    mra.buf[:5] = b"hello"
    b.qp.post_recv(RecvWR(1, [mrb.sge(100, 1000)]))
    a.qp.post_send(SendWR(2, WrOpcode.SEND_WITH_IMM, [mra.sge(0, 5)], imm_data=42))
    assert [(w.ok, w.opcode) for w in a.wait()] == [(True, WcOpcode.SEND)]
    [got] = b.wait()
    assert (got.opcode, got.byte_len, got.imm_data) == (WcOpcode.RECV, 5, 42)
    assert bytes(mrb.buf[100:105]) == b"hello"
    mrb.buf[4000:4004] = b"back"
    a.qp.post_send(SendWR(3, WrOpcode.RDMA_READ, [mra.sge(10, 4)],
                          remote_addr=mrb.addr + 4000, rkey=mrb.rkey))
    [read] = a.wait()
    assert read.ok and read.opcode == WcOpcode.RDMA_READ and bytes(mra.buf[10:14]) == b"back"


def test_send_queue_back_pressure_completes_everything_in_order(provider):
    a_dev, b_dev = _two_devices(provider)
    a, b = End(provider, a_dev, max_send_wr=2), End(provider, b_dev)
    try:
        a.qp.connect(b.qp.endpoint())
        b.qp.connect(a.qp.endpoint())
        src, dst = a.pd.alloc_mr(4096, Access.all()), b.pd.alloc_mr(4096, Access.all())
        for i in range(10):
            a.qp.post_send(SendWR(i, WrOpcode.RDMA_WRITE, [src.sge(i * 8, 8)],
                                  remote_addr=dst.addr + i * 8, rkey=dst.rkey))
        assert a.qp.send_backlog > 0
        wcs = a.wait(10)
        assert [w.wr_id for w in wcs] == list(range(10)) and all(w.ok for w in wcs)
    finally:
        a.close()
        b.close()


def test_error_completion_carries_opcode_and_flushes_the_rest(pair):
    a, b = pair
    src = a.pd.alloc_mr(4096, Access.all())
    dst = b.pd.alloc_mr(4096, Access.LOCAL_WRITE)  # no remote access
    a.qp.post_send(SendWR(1, WrOpcode.RDMA_WRITE, [src.sge(0, 64)],
                          remote_addr=dst.addr, rkey=dst.rkey))
    [bad] = a.wait()
    assert bad.status == WcStatus.REM_ACCESS_ERR and bad.opcode == WcOpcode.RDMA_WRITE
    assert "remote access" in bad.detail
    assert a.qp.state == QPState.ERR
    a.qp.post_send(SendWR(2, WrOpcode.RDMA_READ, [src.sge(0, 8)], remote_addr=dst.addr, rkey=1))
    [flushed] = a.wait()
    assert (flushed.wr_id, flushed.status, flushed.opcode) == \
        (2, WcStatus.WR_FLUSH_ERR, WcOpcode.RDMA_READ)


def test_to_error_flushes_posted_receives(pair):
    a, b = pair
    mr = b.pd.alloc_mr(4096, Access.all())
    for i in range(3):
        b.qp.post_recv(RecvWR(i, [mr.sge(0, 64)]))
    b.qp.to_error("test")
    wcs = b.wait(3)
    assert [(w.wr_id, w.status, w.opcode) for w in wcs] == \
        [(i, WcStatus.WR_FLUSH_ERR, WcOpcode.RECV) for i in range(3)]


def test_path_mtu_is_negotiated_down_to_the_peer(provider):
    a_dev, b_dev = _two_devices(provider)
    a, b = End(provider, a_dev), End(provider, b_dev, mtu=256)
    try:
        remote = b.qp.endpoint()
        assert remote.mtu == 256
        a.qp.connect(remote)
        assert a.qp.path_mtu == 256
        attr, _ = a.qp._qp.query(_pyverbs.load().enums.IBV_QP_PATH_MTU)
        assert attr.path_mtu == 1  # IBV_MTU_256, as the device holds it
    finally:
        a.close()
        b.close()


def test_wait_blocks_on_the_completion_channel_and_wake_interrupts(pair):
    a, _ = pair
    assert a.cq._fd is not None, "the completion channel's descriptor was not found"
    assert a.cq.wait(timeout=0.2) == []
    waiting = Waiting(a.cq)
    a.cq.wake()
    assert waiting.result() == []


def test_misuse_raises(pair, provider):
    a, b = pair
    with pytest.raises(InvalidArgumentError, match="'soft' endpoint"):
        a.qp.connect(QPEndpoint("soft", 1))
    with pytest.raises(FailedPreconditionError, match="connect needs INIT"):
        a.qp.connect(b.qp.endpoint())
    fresh = a.ctx.create_qp(a.pd, a.cq, a.cq, 4, 2)
    with pytest.raises(InvalidArgumentError, match="malformed ibverbs endpoint: GID 'nonsense'"):
        fresh.connect(QPEndpoint("ibverbs", 5, gid="nonsense"))
    with pytest.raises(InvalidArgumentError, match="path MTU 1500"):
        fresh.connect(QPEndpoint("ibverbs", 5, gid=a.ctx.gid, mtu=1500))
    with pytest.raises(FailedPreconditionError, match="not connected"):
        fresh.post_send(SendWR(1, WrOpcode.SEND))
    fresh.post_recv(RecvWR(1))
    fresh.post_recv(RecvWR(2))
    with pytest.raises(ResourceExhaustedError, match="receive queue"):
        fresh.post_recv(RecvWR(3))
    mr = a.pd.alloc_mr(4096, Access.all())
    with pytest.raises(InvalidArgumentError, match="outside its memory region"):
        a.qp.post_recv(RecvWR(4, [SGE(mr.addr + 4000, 200, mr.lkey)]))
    with pytest.raises(InvalidArgumentError, match="read-only"):
        a.pd.reg_mr(b"constant", Access.LOCAL_WRITE)
    with pytest.raises(InvalidArgumentError, match="non-contiguous"):
        a.pd.reg_mr(np.zeros((4, 4))[:, 1], Access.LOCAL_WRITE)


def test_wait_wakes_on_a_completion_that_arrives_later(pair):
    a, b = pair
    src, dst = a.pd.alloc_mr(64, Access.all()), b.pd.alloc_mr(64, Access.all())
    b.qp.post_recv(RecvWR(9))
    post = SendWR(1, WrOpcode.RDMA_WRITE_WITH_IMM, [src.sge()], remote_addr=dst.addr,
                  rkey=dst.rkey, imm_data=5)
    waiting = Waiting(b.cq)
    a.qp.post_send(post)  # while b waits (or is about to): the completion wakes it
    assert [(w.wr_id, w.opcode) for w in waiting.result()] == [(9, WcOpcode.RECV_RDMA_WITH_IMM)]


def test_remote_write_lands_in_a_registered_numpy_array(pair):
    a, b = pair
    target = np.zeros((64, 16), dtype=np.float32)
    mr = b.pd.reg_mr(target, Access.LOCAL_WRITE | Access.REMOTE_WRITE)
    values = np.arange(target.size, dtype=np.float32).reshape(target.shape)
    src = a.pd.reg_mr(values, Access.LOCAL_WRITE)
    a.qp.post_send(SendWR(1, WrOpcode.RDMA_WRITE, [src.sge()], remote_addr=mr.addr, rkey=mr.rkey))
    assert a.wait()[0].ok
    np.testing.assert_array_equal(target, values)


def test_closing_the_context_closes_what_was_made_on_it(provider):
    a_dev, _ = _two_devices(provider)
    end = End(provider, a_dev)
    mr = end.pd.alloc_mr(4096, Access.all())
    fds = len(os.listdir("/proc/self/fd"))
    end.close()
    assert end.qp.closed and end.cq.closed and end.pd.closed and mr.closed
    assert len(os.listdir("/proc/self/fd")) < fds


def test_calls_on_closed_objects_raise_instead_of_crashing(provider):
    a_dev, _ = _two_devices(provider)
    end = End(provider, a_dev)
    mr = end.pd.alloc_mr(4096, Access.all())
    end.pd.close()  # closes the QP and the MR made on it first
    assert end.qp.closed and mr.closed
    with pytest.raises(FailedPreconditionError, match="closed"):
        end.qp.post_recv(RecvWR(1))
    with pytest.raises(FailedPreconditionError, match="closed"):
        end.pd.alloc_mr(64, Access.all())
    waiting = Waiting(end.cq)
    end.cq.close()  # a thread in wait() (or about to enter it) returns
    assert waiting.result() == []
    assert end.cq.poll() == []
    end.close()
