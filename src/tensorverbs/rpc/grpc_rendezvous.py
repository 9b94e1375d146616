"""The "grpc" protocol: a remote recv is a RecvTensor call streaming the tensor back."""
from __future__ import annotations

import asyncio
import concurrent.futures
import secrets

import grpc

from ..errors import TensorverbsError, UnavailableError, as_error
from ..rendezvous.key import RendezvousKey, format_key
from ..rendezvous.recv_call import PendingRecv, RecvCall
from ..rendezvous.remote import RemoteRendezvous
from . import tensorverbs_pb2 as pb
from .errors import from_rpc_error
from .tensor_stream import read_tensor


async def _ended(rpc) -> None:
    """Let a RecvTensor call whose tensor is in finish (its status no longer matters)."""
    await rpc.code()


class _GrpcRecv(PendingRecv):
    """A RecvTensor call. Cancelling it before the tensor started to arrive asks the
    sender to withdraw the request (CancelRecvTensor) and keeps reading: the call then
    ends either with CANCELLED or with the tensor, which is handed on, never dropped."""

    def __init__(self, rendezvous: "GrpcRemoteRendezvous", key: RendezvousKey) -> None:
        self.rendezvous, self.key = rendezvous, key
        self.peer = f"{key.src} ({rendezvous.rt.cluster.address(key.src)})"
        self.request_id = secrets.randbits(63)
        self.reached = False      # the peer answered the handshake
        self.requested = False    # the RecvTensor call is open
        self.streaming = False    # its first message arrived
        self.task: concurrent.futures.Future | None = None

    def cancel(self) -> None:
        self.rendezvous.rt.loop.call_soon(self._cancel)

    def _cancel(self) -> None:  # on the event loop
        if not self.requested:
            if self.task is not None:
                self.task.cancel()
        elif not self.streaming:
            asyncio.ensure_future(self.rendezvous.withdraw(self))

    def deadline_error(self, call: RecvCall, timeout: float) -> TensorverbsError:
        if not self.reached:
            return UnavailableError(f"{call.what}: {self.peer} could not be reached within {timeout:g} s")
        return super().deadline_error(call, timeout)


class GrpcRemoteRendezvous(RemoteRendezvous):
    """Remote recvs over gRPC streams."""

    protocol = "grpc"

    def recv_from_remote(self, call: RecvCall) -> PendingRecv:
        op = _GrpcRecv(self, call.key)
        op.task = self.rt.loop.submit(self._fetch(call, op))
        return op

    async def withdraw(self, op: _GrpcRecv) -> None:
        """Ask the sender to withdraw ``op``'s request (best effort: a dead peer ends the
        call anyway)."""
        try:
            await self.rt.peers.peer(op.key.src).cancel_recv_tensor(
                pb.CancelRecvTensorRequest(request_id=op.request_id), timeout=30)
        except grpc.aio.AioRpcError:
            pass

    async def _fetch(self, call: RecvCall, op: _GrpcRecv) -> None:
        peers, key, step_id = self.rt.peers, call.key, call.step_id
        try:
            status = await peers.handshake(key.src)
            op.reached = True
            request = pb.RecvTensorRequest(
                step_id=step_id, rendezvous_key=format_key(key.with_incarnation(status.incarnation)),
                request_id=op.request_id)
            rpc = peers.peer(key.src).recv_tensor()
            op.requested = True
            await rpc.write(request)
            value, nbytes = await read_tensor(rpc, self.options.rdma_config.max_tensor_bytes,
                                              lambda: setattr(op, "streaming", True), call.out)
            await rpc.write(pb.RecvTensorRequest(received=True))  # the sender may forget it
            await rpc.done_writing()
            asyncio.ensure_future(_ended(rpc))
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.UNAVAILABLE:
                peers.lost(key.src)
            call.fail(from_rpc_error(exc, op.peer))
        except asyncio.CancelledError:
            pass  # whoever cancelled settles the future
        except Exception as exc:
            call.fail(as_error(exc, call.what))
        else:
            self.complete(call, value, nbytes)
