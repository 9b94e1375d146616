"""A slow peer (as a task busy in a set-up storm of many peers): one slow to accept, whose
first bytes on every new connection come 1.5 s late, and one slow to answer, whose every
answer comes 0.5 s late. The recv waits for it within the start-up grace period; it does
not fail because each connection attempt, or each try of the handshake, is given up
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
#: how late the peer's first bytes come on each connection (slow to accept)
DELAY = 1.5
#: how late each of the peer's answers comes (slow to answer)
LAG = 0.5


class SlowPeerProxy:
    """Listens on ``port`` and forwards each connection to ``target``, holding the
    target's first bytes until ``first`` seconds after the connection was accepted, and
    each later chunk of them ``every`` seconds."""

    def __init__(self, port: int, target: tuple[str, int], first: float, every: float = 0.0) -> None:
        self.target, self.first, self.every = target, first, every
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
            threading.Thread(target=self._pipe, args=(server, client, accepted + self.first, self.every),
                             daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket, hold_until: float | None = None,
              every: float = 0.0) -> None:
        try:
            while data := src.recv(1 << 16):
                if hold_until is not None:
                    time.sleep(max(0.0, hold_until - time.monotonic()))  # the fault: a slow peer
                    hold_until = None
                elif every:
                    time.sleep(every)
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
@pytest.mark.parametrize("first, every", [(DELAY, 0.0), (LAG, LAG)], ids=["slow-to-accept", "slow-to-answer"])
def test_a_slow_peer_is_waited_for(variant, first, every):
    protocol, env = VARIANTS[variant]
    spec = cluster_spec({"ps": 1, "worker": 1})
    ps_port = int(spec["ps"][0].rsplit(":", 1)[1])
    proxy_port = free_port(HOST, [ps_port, int(spec["worker"][0].rsplit(":", 1)[1])])
    proxy = SlowPeerProxy(proxy_port, (HOST, ps_port), first, every)
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
