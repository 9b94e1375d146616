"""A Server leaves nothing behind: not when its construction fails (no thread left
running, its port free), not when it is dropped without stop() (a finalizer stops it)."""
from __future__ import annotations

import gc
import socket
import threading
import weakref

import pytest

import tensorverbs as tv
from tensorverbs.local_cluster import cluster_spec
from tensorverbs.verbs.config import RdmaConfig

from variants import VARIANTS

JOIN = 30.0  # seconds a thread of a server that is gone may take to end


def _port(address: str) -> tuple[str, int]:
    host, port = address.rsplit(":", 1)
    return host, int(port)


def _assert_gone(before: set[threading.Thread], address: str) -> None:
    """Every thread started since ``before`` ends, and ``address`` can be listened on."""
    for thread in set(threading.enumerate()) - before:
        thread.join(JOIN)
        assert not thread.is_alive(), f"thread {thread.name} is still running"
    with socket.create_server(_port(address)):
        pass  # nobody listens there any more


@pytest.mark.parametrize("variant", ["grpc", "verbs"])
def test_a_server_that_fails_to_start_leaves_nothing(variant, monkeypatch):
    """Its metrics port is taken: the server fails after its gRPC server started."""
    protocol, env = VARIANTS[variant]
    spec = cluster_spec({"ps": 1})
    before = set(threading.enumerate())
    with socket.create_server(("127.0.0.1", 0)) as taken:
        with pytest.raises(tv.UnavailableError):
            tv.Server(spec, "ps", 0, protocol, config=RdmaConfig.from_env(env),
                      metrics_port=taken.getsockname()[1])
    _assert_gone(before, spec["ps"][0])


@pytest.mark.parametrize("variant", ["grpc", "verbs"])
def test_a_server_with_a_bad_setting_leaves_nothing(variant, monkeypatch):
    protocol, env = VARIANTS[variant]
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("RDMA_QP_MTU", "7")
    spec = cluster_spec({"ps": 1})
    before = set(threading.enumerate())
    with pytest.raises(tv.InvalidArgumentError, match="RDMA_QP_MTU"):
        tv.Server(spec, "ps", 0, protocol)
    _assert_gone(before, spec["ps"][0])


@pytest.mark.parametrize("variant", ["grpc", "verbs"])
def test_a_server_dropped_without_stop_stops(variant):
    protocol, env = VARIANTS[variant]
    spec = cluster_spec({"ps": 1, "worker": 1})
    before = set(threading.enumerate())
    server = tv.Server(spec, "ps", 0, protocol, config=RdmaConfig.from_env(env))
    server.send("w", [1.0, 2.0], to="/job:worker/task:0")
    dropped = weakref.ref(server)
    del server
    gc.collect()
    assert dropped() is None, "something keeps the dropped server alive"
    _assert_gone(before, spec["ps"][0])
