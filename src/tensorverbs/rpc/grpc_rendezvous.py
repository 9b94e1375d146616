"""The "grpc" protocol: a remote recv is a RecvTensor call streaming the tensor back."""
from __future__ import annotations

import asyncio
import concurrent.futures

import grpc

from ..errors import TensorverbsError, UnavailableError
from ..rendezvous.key import format_key
from ..rendezvous.remote import PendingRecv, RecvCall, RemoteRendezvous
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

    def deadline_error(self, call: RecvCall, timeout: float) -> TensorverbsError:
        if not self.reached:
            return UnavailableError(f"{call.what}: {self.peer} could not be reached within {timeout:g} s")
        return super().deadline_error(call, timeout)


class GrpcRemoteRendezvous(RemoteRendezvous):
    """Remote recvs over gRPC streams."""

    protocol = "grpc"

    def recv_from_remote(self, call: RecvCall) -> PendingRecv:
        op = _GrpcRecv(f"{call.key.src} ({self.rt.cluster.address(call.key.src)})")
        op.task = self.rt.loop.submit(self._fetch(call, op))
        return op

    async def _fetch(self, call: RecvCall, op: _GrpcRecv) -> None:
        peers, key, step_id = self.rt.peers, call.key, call.step_id
        try:
            status = await peers.handshake(key.src)
            op.reached = True
            request = pb.RecvTensorRequest(
                step_id=step_id, rendezvous_key=format_key(key.with_incarnation(status.incarnation)))
            value, nbytes = await read_tensor(peers.peer(key.src).recv_tensor(request))
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.UNAVAILABLE:
                peers.lost(key.src)
            call.fail(from_rpc_error(exc, op.peer))
        except TensorverbsError as exc:
            call.fail(exc)
        except asyncio.CancelledError:
            pass  # whoever cancelled settles the future
        else:
            self.complete(call, value, nbytes)
