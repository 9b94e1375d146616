"""Where a task listens: a task whose address has port 0 binds a free port and tells it
(``server.target``, its cluster spec), and every socket a task listens on, the data
plane's included, is on the host of its ``bind_address``."""
from __future__ import annotations

import ipaddress
import os
import pathlib

import numpy as np
import pytest

import tensorverbs as tv
from tensorverbs.local_cluster import TaskProcess, cluster_spec
from tensorverbs.verbs.config import RdmaConfig

from variants import VARIANTS


@pytest.mark.parametrize("variant", ["grpc", "verbs"])
def test_port_0_binds_a_free_port_and_tells_it(variant, step):
    protocol, env = VARIANTS[variant]
    spec = cluster_spec({"worker": 1})
    spec["ps"] = ["127.0.0.1:0"]
    with tv.Server(spec, "ps", 0, protocol, config=RdmaConfig.from_env(env)) as ps:
        assert ps.target.startswith("grpc://127.0.0.1:")
        address = ps.target.removeprefix("grpc://")
        assert address != "127.0.0.1:0"
        assert ps.cluster.address("/job:ps/task:0") == address
        worker = TaskProcess({**spec, "ps": [address]}, "worker", 0, protocol, env)
        try:
            ps.add_task("worker", 0, spec["worker"][0])
            ps.send("w", np.arange(6.0), to="/job:worker/task:0", step_id=step)
            assert worker.recv("w", "/job:ps/task:0", step, timeout=30).tolist() == list(range(6))
            worker.send("back", np.arange(3), to="/job:ps/task:0", step_id=step)
            assert ps.recv("back", "/job:worker/task:0", step, timeout=30).tolist() == [0, 1, 2]
        finally:
            worker.stop()


def _address(hex_address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """An address as /proc/net/tcp{,6} writes it (32-bit words in host order)."""
    raw = bytes.fromhex(hex_address)
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return ipaddress.ip_address(words)


def _listening(pid: int) -> set[tuple[str, int]]:
    """(host, port) of every TCP socket (IPv4 and IPv6) process ``pid`` listens on."""
    inodes = set()
    for fd in pathlib.Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = set()
    for table in ("tcp", "tcp6"):
        for line in pathlib.Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and inode in inodes:  # LISTEN
                host, port = local.split(":")
                found.add((str(_address(host)), int(port, 16)))
    return found


@pytest.mark.parametrize("variant", ["verbs", "verbs-tcp"])
def test_every_listening_socket_is_on_the_bind_address(variant, step):
    """The cluster names the tasks by 127.0.0.1; the ps binds 0.0.0.0 (every interface)."""
    protocol, env = VARIANTS[variant]
    spec = cluster_spec({"ps": 1, "worker": 1})
    port = spec["ps"][0].rsplit(":", 1)[1]
    ps = TaskProcess(spec, "ps", 0, protocol, env, bind_address=f"0.0.0.0:{port}")
    try:
        with tv.Server(spec, "worker", 0, protocol, config=RdmaConfig.from_env(env)) as worker:
            ps.send("w", np.arange(4.0), to="/job:worker/task:0", step_id=step)
            assert worker.recv("w", "/job:ps/task:0", step, timeout=30).tolist() == [0.0, 1.0, 2.0, 3.0]
            listening = _listening(ps.process.pid)
            assert int(port) in {p for _, p in listening}  # gRPC
            assert len(listening) >= 2, "the data plane listens on no TCP socket"
            assert {host for host, _ in listening} <= {"0.0.0.0", "::"}, listening
    finally:
        ps.stop()
