"""A peer slow to accept: its first bytes on every new connection come 1.5 s late (as
from a task busy in a set-up storm of many peers). The recv waits for it within the
start-up grace period; it does not fail because each connection attempt is given up
before the peer could answer."""
from __future__ import annotations

import socket
import threading
import time

import pytest

import tensorverbs as tv
from tensorverbs.local_cluster import cluster_spec, pattern, same
from tensorverbs.ports import free_port
from tensorverbs.verbs.config import RdmaConfig

from variants import VARIANTS

HOST = "127.0.0.1"
PS = "/job:ps/replica:0/task:0"
WORKER = "/job:worker/replica:0/task:0"
#: how late the peer's first bytes come on each connection
DELAY = 1.5


class SlowAcceptProxy:
    """Listens on ``port`` and forwards each connection to ``target``, holding the
    target's first bytes until DELAY seconds after the connection was accepted."""

    def __init__(self, port: int, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server((HOST, port))
        self.sockets: list[socket.socket] = [self.listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            accepted = time.monotonic()
            try:
                server = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            self.sockets += [client, server]
            threading.Thread(target=self._pipe, args=(client, server, None), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, accepted + DELAY), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket, hold_until: float | None) -> None:
        try:
            while data := src.recv(1 << 16):
                if hold_until is not None:
                    time.sleep(max(0.0, hold_until - time.monotonic()))  # the fault: a slow peer
                    hold_until = None
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        for s in self.sockets:
            s.close()


@pytest.mark.parametrize("variant", ["grpc", "verbs"])
def test_a_peer_slow_to_accept_is_waited_for(variant):
    protocol, env = VARIANTS[variant]
    spec = cluster_spec({"ps": 1, "worker": 1})
    ps_port = int(spec["ps"][0].rsplit(":", 1)[1])
    proxy_port = free_port(HOST, [ps_port, int(spec["worker"][0].rsplit(":", 1)[1])])
    proxy = SlowAcceptProxy(proxy_port, (HOST, ps_port))
    config = RdmaConfig.from_env(env)
    try:
        with tv.Server(spec, "ps", 0, protocol, config=config) as ps, \
                tv.Server(dict(spec, ps=[f"{HOST}:{proxy_port}"]), "worker", 0, protocol, config=config,
                          startup_grace=10) as worker:
            ps.send("w", pattern(4096, 3), to=WORKER)
            assert same(worker.recv("w", PS, timeout=30), pattern(4096, 3))
            assert ps.flush(30) is None
    finally:
        proxy.close()
