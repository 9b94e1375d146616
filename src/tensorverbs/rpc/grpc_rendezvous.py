"""The "grpc" protocol: a remote recv is a RecvTensor call streaming the tensor back."""
from __future__ import annotations

import asyncio
import concurrent.futures

import grpc

from ..errors import TensorverbsError, UnavailableError
from ..rendezvous.key import RendezvousKey, format_key
from ..rendezvous.remote import PendingRecv, RemoteRendezvous, settle
from . import tensorverbs_pb2 as pb
from .errors import from_rpc_error
from .tensor_stream import read_tensor


class _GrpcRecv(PendingRecv):
    def __init__(self, peer: str) -> None:
        self.peer = peer
        self.reached = False
        self.task: concurrent.futures.Future | None = None

    def cancel(self) -> None:
        if self.task is not None:
            self.task.cancel()

    def deadline_error(self, what: str, timeout: float) -> TensorverbsError:
        if not self.reached:
            return UnavailableError(f"{what}: {self.peer} could not be reached within {timeout:g} s")
        return super().deadline_error(what, timeout)


class GrpcRemoteRendezvous(RemoteRendezvous):
    """Remote recvs over gRPC streams."""

    protocol = "grpc"

    def recv_from_remote(self, key: RendezvousKey, step_id: int,
                         fut: concurrent.futures.Future) -> PendingRecv:
        op = _GrpcRecv(f"{key.src} ({self.rt.cluster.address(key.src)})")
        op.task = self.rt.loop.submit(self._fetch(key, step_id, fut, op))
        return op

    async def _fetch(self, key: RendezvousKey, step_id: int, fut: concurrent.futures.Future,
                     op: _GrpcRecv) -> None:
        peers = self.rt.peers
        try:
            status = await peers.handshake(key.src)
            op.reached = True
            request = pb.RecvTensorRequest(
                step_id=step_id, rendezvous_key=format_key(key.with_incarnation(status.incarnation)))
            value, nbytes = await read_tensor(peers.peer(key.src).recv_tensor(request))
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.UNAVAILABLE:
                peers.lost(key.src)
            settle(fut, from_rpc_error(exc, op.peer))
        except TensorverbsError as exc:
            settle(fut, exc)
        except asyncio.CancelledError:
            pass  # whoever cancelled settles the future
        else:
            self.complete(fut, value, nbytes)
