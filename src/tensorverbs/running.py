"""What a started Server runs (its threads, runtime, protocol, gRPC server and metrics
endpoint), and stopping it: by ``Server.stop`` or, for a Server dropped without it, by
the Server's finalizer."""
from __future__ import annotations

import concurrent.futures
import logging
import threading

import grpc

from .errors import Code
from .metrics.endpoint import MetricsEndpoint
from .one_sided import OneSided
from .rendezvous.completion import Sends
from .rendezvous.deadlines import Deadlines
from .rendezvous.lanes import Lanes
from .rendezvous.remote import RemoteRendezvous
from .rpc.loop import EventLoopThread
from .runtime import TaskRuntime

log = logging.getLogger(__name__)

#: how long stopping may wait for the gRPC server and channels to close (seconds)
CLOSE_TIMEOUT = 10.0


class Running:
    """What a started Server runs: its threads, runtime ``rt``, protocol, gRPC server and
    metrics endpoint, each set once started. It refers to nothing that refers to the
    Server, so a finalizer can stop it once the Server is gone."""

    def __init__(self, stopped: threading.Event, sends: Sends) -> None:
        self.stopped = stopped
        self.sends = sends
        self.loop: EventLoopThread | None = None
        self.deadlines: Deadlines | None = None
        self.lanes: Lanes | None = None
        self.rt: TaskRuntime | None = None
        self.rendezvous: RemoteRendezvous | None = None
        self.one_sided: OneSided | None = None
        self.grpc: grpc.aio.Server | None = None
        self.metrics_endpoint: MetricsEndpoint | None = None
        self._once = threading.Lock()
        self._done = False

    def shutdown(self) -> None:
        """Fail pending recvs, close channels, stop serving and end the threads; once."""
        with self._once:
            if self._done:
                return
            self._done = True
        self.stopped.set()
        rt = self.rt
        try:
            if self.metrics_endpoint is not None:
                self.metrics_endpoint.stop()
            if self.rendezvous is not None:
                self.rendezvous.stop()
            if self.one_sided is not None:
                self.one_sided.close()
            self.sends.close(int(Code.CANCELLED), "the server stopped before its receiver took it")
            if rt is not None:
                if hasattr(rt, "shared"):
                    rt.shared.close()
                try:
                    rt.loop.submit(self._close(rt)).result(timeout=CLOSE_TIMEOUT)
                except concurrent.futures.TimeoutError:
                    log.warning("%s: closing gRPC took more than %g s", rt.task, CLOSE_TIMEOUT)
        finally:
            for part in (self.loop, self.deadlines):
                if part is not None:
                    part.stop()
            if self.lanes is not None:
                self.lanes.close()

    async def _close(self, rt: TaskRuntime) -> None:
        if hasattr(rt, "shared"):  # the releases of what it received by handle, before the channels close
            await rt.shared.releases.close()
        if self.grpc is not None:
            await self.grpc.stop(grace=0.5)
        await rt.peers.close()


def shut_down_dropped(running: Running) -> None:
    """The finalizer of a Server dropped without stop(): its shutdown runs in a thread of
    its own (the garbage collector may run anywhere, the event loop's thread included)."""
    threading.Thread(target=running.shutdown, name="tensorverbs-finalizer", daemon=True).start()
