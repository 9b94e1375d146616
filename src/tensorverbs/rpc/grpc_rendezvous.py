"""The "grpc" protocol: a remote recv is a RecvTensor call streaming the tensor back.

A call whose connection broke (an outage) is made again once the sender answers as the
same incarnation within the reconnect window (:meth:`Peers.answers_again`), after
withdrawing the first request: the sender holds a tensor until its receiver's word on
the call, so the tensor comes with the new call, which names the broken ones. A call
that did not end as the sender's answer to it leaves this task owing the sender its word
on it (:mod:`.receipts`): taken, if its tensor arrived whole, else dropped; so the
sender neither keeps a tensor nor serves it twice. A sender that does not answer again
is gone: the recv fails with UnavailableError naming it.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import secrets
from typing import TYPE_CHECKING

import grpc

from ..errors import DeadlineExceededError, TensorverbsError, UnavailableError, as_error
from ..rendezvous.key import RendezvousKey, format_key
from ..rendezvous.local import Value
from ..rendezvous.recv_call import PendingRecv, RecvCall
from ..rendezvous.remote import ProtocolOptions, RemoteRendezvous
from . import tensorverbs_pb2 as pb
from .errors import connection_broke, from_rpc_error, from_service
from .peers import protocol_mismatch
from .receipts import LAST_SECONDS, Receipts
from .tensor_stream import read_tensor

if TYPE_CHECKING:
    from ..runtime import TaskRuntime

#: how many times one recv makes its call again after its connection broke
MAX_RECONNECTS = 3


class _GrpcRecv(PendingRecv):
    """A RecvTensor call. Cancelling it before the tensor started to arrive asks the
    sender to withdraw the request (CancelRecvTensor) and keeps reading: the call then
    ends either with CANCELLED or with the tensor, which is handed on, never dropped."""

    def __init__(self, rendezvous: "GrpcRemoteRendezvous", key: RendezvousKey) -> None:
        self.rendezvous, self.key = rendezvous, key
        self.peer = f"{key.src} ({rendezvous.rt.cluster.address(key.src)})"
        self.request_id = secrets.randbits(63)
        self.retry_of: list[int] = []  # the request ids of the calls that broke
        self.reached = False      # the peer answered the handshake
        self.requested = False    # the RecvTensor call is open
        self.streaming = False    # its first message arrived
        self.task: concurrent.futures.Future | None = None

    def renew(self) -> None:
        """Before the call is made again: a new request, not open yet."""
        self.retry_of.append(self.request_id)
        self.request_id = secrets.randbits(63)
        self.requested = self.streaming = False

    def cancel(self) -> None:
        self.rendezvous.rt.loop.call_soon(self._cancel)

    def _cancel(self) -> None:  # on the event loop
        if not self.requested:
            if self.task is not None:
                self.task.cancel()
        elif not self.streaming:
            asyncio.ensure_future(self.rendezvous.withdraw(self))

    def peer_answered(self) -> bool:
        return self.reached

    def deadline_error(self, call: RecvCall, timeout: float) -> TensorverbsError:
        if not self.reached:
            return DeadlineExceededError(f"{call.what} timed out after {timeout:g} s: {self.peer} could not be "
                                         "reached (it has not started yet, or cannot be reached)")
        return super().deadline_error(call, timeout)


class GrpcRemoteRendezvous(RemoteRendezvous):
    """Remote recvs over gRPC streams."""

    protocol = "grpc"

    def __init__(self, runtime: "TaskRuntime", options: ProtocolOptions) -> None:
        super().__init__(runtime, options)
        self.receipts = Receipts(runtime.peers)
        self._ending: set[asyncio.Task] = set()  # (held: the loop keeps tasks weakly)

    def stop(self) -> None:
        super().stop()
        try:  # (before the channels close)
            self.rt.loop.submit(self._last_words()).result(timeout=3 * LAST_SECONDS)
        except concurrent.futures.TimeoutError:
            pass

    async def _last_words(self) -> None:
        """The calls ending as this task stops (a confirmation on its way) end first, for
        LAST_SECONDS at most: each then owes its word, or not; then the words owed leave."""
        if self._ending:
            await asyncio.wait(list(self._ending), timeout=LAST_SECONDS)
        await self.receipts.close()

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
        peers, key = self.rt.peers, call.key
        try:
            status = await peers.handshake(key.src)
            op.reached = True
            mismatch = protocol_mismatch(status, op.peer, self.rt.task, self.rt.protocol)
            if mismatch is not None:
                call.fail(mismatch)
                return
            for attempt in itertools.count():
                try:
                    value, nbytes = await self._request(call, op, status.incarnation)
                    break
                except grpc.aio.AioRpcError as exc:
                    if attempt >= MAX_RECONNECTS or not connection_broke(exc):
                        raise
                    self.rt.counters.add("recv_calls_broken", 1)
                    why = await peers.answers_again(key.src, status.incarnation)
                    if why is not None:
                        raise UnavailableError(f"{op.peer} is unavailable: {exc.details()}; {why}") from None
                    await self.withdraw(op)  # if the sender still holds the broken call's request
                    op.renew()
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.UNAVAILABLE:
                peers.lost(key.src)
            call.fail(from_rpc_error(exc, op.peer))
        except UnavailableError as exc:
            peers.lost(key.src)
            call.fail(exc)
        except asyncio.CancelledError:
            pass  # whoever cancelled settles the future
        except Exception as exc:
            call.fail(as_error(exc, call.what))
        else:
            self.complete(call, value, nbytes)

    async def _request(self, call: RecvCall, op: _GrpcRecv, incarnation: int) -> tuple[Value, int]:
        """One RecvTensor call for ``call``: (the value, its payload bytes)."""
        request = pb.RecvTensorRequest(
            step_id=call.step_id, rendezvous_key=format_key(call.key.with_incarnation(incarnation)),
            request_id=op.request_id, retry_of=op.retry_of, receiver_incarnation=self.rt.incarnation)
        rpc = self.rt.peers.peer(call.key.src).recv_tensor()
        op.requested = True
        try:
            await rpc.write(request)
            value, nbytes = await read_tensor(rpc, self.options.rdma_config.max_tensor_bytes,
                                              lambda: setattr(op, "streaming", True), call.out)
        except BaseException:
            self._ended(rpc, call.key.src, incarnation, op.request_id, taken=False)
            raise
        try:
            await rpc.write(pb.RecvTensorRequest(received=True))  # the sender may forget it
            await rpc.done_writing()
        except Exception:  # (AioRpcError, InvalidStateError, gRPC's ExecuteBatchError: however the
            pass           # call broke, the tensor is this task's; the word is owed, below)
        finally:
            self._ended(rpc, call.key.src, incarnation, op.request_id, taken=True)
        return value, nbytes

    def _ended(self, rpc, sender, incarnation: int, request_id: int, taken: bool) -> None:
        """Once the call ``request_id`` is over (ended here if it is not ``taken``): unless
        it ended as the sender's answer to it, owe the sender the word on it."""
        if not taken:
            rpc.cancel()
        ending = asyncio.ensure_future(self._owe(rpc, sender, incarnation, request_id, taken))
        self._ending.add(ending)
        ending.add_done_callback(self._ending.discard)

    async def _owe(self, rpc, sender, incarnation: int, request_id: int, taken: bool) -> None:
        code = await rpc.code()
        if taken and code == grpc.StatusCode.OK:
            return  # the sender read the confirmation
        if not taken and from_service(await rpc.trailing_metadata()):
            return  # the sender ended it: it holds nothing for it
        self.receipts.owe(sender, incarnation, request_id, taken)
