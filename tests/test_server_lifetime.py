"""A Server leaves nothing behind: not when its construction fails (no thread left
running, its port free), not when it is dropped without stop() (a finalizer stops it);
and a process that exits with a server running exits cleanly."""
from __future__ import annotations

import gc
import socket
import subprocess
import sys
import textwrap
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


#: a process that exits with its server running, whose native core wakes the server's
#: thread waiting in it (for lost channels) as the interpreter finalizes
_WOKEN_AT_EXIT = textwrap.dedent("""
    import time
    import tensorverbs as tv
    from tensorverbs.local_cluster import free_port

    server = tv.Server({"solo": [f"127.0.0.1:{free_port('127.0.0.1')}"]}, "solo", 0, "grpc+verbs")

    class StopsTheCoreAtFinalization:
        def __init__(self, core):
            self.core, self.sleep = core, time.sleep

        def __del__(self):  # as the module's globals are cleared, the interpreter finalizing
            self.core.stop()
            self.sleep(0.5)  # (the GIL released: the woken thread comes back meanwhile)

    stopper = StopsTheCoreAtFinalization(server._rendezvous.core)
""")


def test_a_thread_woken_in_the_core_as_the_interpreter_finalizes_does_not_abort_the_process():
    """Such a thread may not take the GIL again: CPython would end it with pthread_exit
    through a destructor of the binding's, and the process with SIGABRT (a Ray actor did,
    exiting with a channel just lost). It parks instead; the process exits with 0."""
    done = subprocess.run([sys.executable, "-c", _WOKEN_AT_EXIT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "Fatal Python error" not in done.stderr, done.stderr[-2000:]
