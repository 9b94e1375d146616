"""gRPC channels to the other tasks, and the handshake that tells whether a peer is up.

The first call to a peer is a GetStatus that waits for the peer to come up, retrying
the connection with backoff for at most the start-up grace period; it yields the peer's
incarnation and protocol. A peer that answers, but refuses this task, fails it at once
and for good: a call refused for want of the job token (UnauthenticatedError), or
connections that keep failing their TLS handshake for a few seconds (a plaintext peer,
one of another CA). Once a peer was reached, a call whose connection broke may try to
reach it again (:meth:`Peers.answers_again`): a peer that answers as the same incarnation
within RECONNECT_SECONDS only lost its connection (a short outage); one that does not is
gone, and the next call does a fresh handshake. Every call
carries the job token, if any, and goes over TLS when the task has a certificate. All
methods run on the task's event loop.
"""
from __future__ import annotations

import asyncio
import itertools
from typing import Callable

import grpc

from ..cluster import ClusterSpec, TaskName
from ..errors import FailedPreconditionError, UnauthenticatedError, UnavailableError
from . import tensorverbs_pb2 as pb
from .auth import JobToken, authorize
from .errors import from_rpc_error
from .loop import shared_task
from .options import CHANNEL_OPTIONS, RECONNECT_SECONDS, method
from .tls import TlsConfig, refusal

#: how long one try of the handshake with a peer that is not up yet lasts at most (its
#: channel reconnects with backoff meanwhile); a try that runs out of time on a connected
#: channel gives the next one twice as long, so that a peer slow to answer (busy in a
#: set-up storm) is reached
RETRY_SECONDS = 0.25
#: how long connections to a peer must keep failing their TLS handshake before that is
#: taken as the peer refusing this task (a peer starting up refuses connections instead)
REFUSAL_SECONDS = 2.0
#: how long a task whose recv timed out waits for the sender to tell what it holds
HELD_SECONDS = 1.0
#: how long a peer whose channel was connected a moment ago (or is new) must keep refusing
#: connections before it is taken as gone: a margin over the reconnect backoff (up to a
#: second), during which the channel reports the last attempt's refusal
REFUSALS_SECONDS = 2.5


def protocol_mismatch(status: pb.GetStatusResponse, peer: object, task: TaskName,
                      protocol: str) -> FailedPreconditionError | None:
    """Why ``task``, running ``protocol``, cannot exchange tensors with ``peer``, which
    answered with ``status``: it runs another protocol (None when it runs the same)."""
    if status.protocol == protocol:
        return None
    return FailedPreconditionError(
        f"{peer} runs {status.protocol}, this task ({task}) {protocol}: every task of a cluster "
        f"must run the same protocol")


def restarted(status: pb.GetStatusResponse | pb.GetRemoteAddressResponse, incarnation: int) -> str | None:
    """Why a peer that answered with ``status`` (or a set-up's reply) is not ``incarnation`` any
    more, if it is not."""
    if status.incarnation == incarnation:
        return None
    return f"it restarted (incarnation {status.incarnation:016x})"


class Peer:
    """The channel to one task and the methods of its service."""

    def __init__(self, task: TaskName, address: str, token: JobToken | None = None,
                 credentials: grpc.ChannelCredentials | None = None, caller: str = "") -> None:
        """The channel to ``task`` at ``address``, whose calls prove with ``token`` that
        ``caller`` (this task) makes them."""
        self.task, self.address = task, address
        self.channel = (grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS) if credentials is None
                        else grpc.aio.secure_channel(address, credentials, options=CHANNEL_OPTIONS))
        self.get_status = authorize(self.channel.unary_unary(
            method("GetStatus"), request_serializer=pb.GetStatusRequest.SerializeToString,
            response_deserializer=pb.GetStatusResponse.FromString), token, caller)
        self.get_remote_address = authorize(self.channel.unary_unary(
            method("GetRemoteAddress"),
            request_serializer=pb.GetRemoteAddressRequest.SerializeToString,
            response_deserializer=pb.GetRemoteAddressResponse.FromString), token, caller)
        # responses stay raw bytes: rpc.tensor_stream parses chunks without copying them
        self.recv_tensor = authorize(self.channel.stream_stream(
            method("RecvTensor"), request_serializer=pb.RecvTensorRequest.SerializeToString,
            response_deserializer=None), token, caller)
        self.cancel_recv_tensor = authorize(self.channel.unary_unary(
            method("CancelRecvTensor"),
            request_serializer=pb.CancelRecvTensorRequest.SerializeToString,
            response_deserializer=pb.CancelRecvTensorResponse.FromString), token, caller)
        self.settle_recv_tensors = authorize(self.channel.unary_unary(
            method("SettleRecvTensors"),
            request_serializer=pb.SettleRecvTensorsRequest.SerializeToString,
            response_deserializer=pb.SettleRecvTensorsResponse.FromString), token, caller)
        self.release_shared_tensor = authorize(self.channel.unary_unary(
            method("ReleaseSharedTensor"),
            request_serializer=pb.ReleaseSharedTensorRequest.SerializeToString,
            response_deserializer=pb.ReleaseSharedTensorResponse.FromString), token, caller)
        self.get_remote_access = authorize(self.channel.unary_unary(
            method("GetRemoteAccess"),
            request_serializer=pb.GetRemoteAccessRequest.SerializeToString,
            response_deserializer=pb.GetRemoteAccessResponse.FromString), token, caller)
        self.hold_publication = authorize(self.channel.unary_unary(
            method("HoldPublication"), request_serializer=pb.HoldPublicationRequest.SerializeToString,
            response_deserializer=pb.HoldPublicationResponse.FromString), token, caller)
        self.serve_relayed = authorize(self.channel.unary_unary(
            method("ServeRelayed"), request_serializer=pb.ServeRelayedRequest.SerializeToString,
            response_deserializer=pb.ServeRelayedResponse.FromString), token, caller)
        self.get_held_tensors = authorize(self.channel.unary_unary(
            method("GetHeldTensors"), request_serializer=pb.GetHeldTensorsRequest.SerializeToString,
            response_deserializer=pb.GetHeldTensorsResponse.FromString), token, caller)
        self.status: pb.GetStatusResponse | None = None
        self._handshake: asyncio.Future | None = None

    def __str__(self) -> str:
        return f"{self.task} ({self.address})"


def _next_try(peer: Peer, error: grpc.aio.AioRpcError, seconds: float) -> float:
    """How long the next try of a call to ``peer`` that failed with ``error`` after
    ``seconds`` may last: twice as long when the peer was connected but did not answer in
    time (it is slow, not down)."""
    if (error.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            and peer.channel.get_state() == grpc.ChannelConnectivity.READY):
        return seconds * 2
    return seconds


class Peers:
    """Channels to every other task of the cluster, created on first use, whose calls prove
    with ``token`` that ``caller`` makes them, over ``tls`` (either may be None)."""

    def __init__(self, cluster: ClusterSpec, startup_grace: float,
                 on_lost: Callable[[TaskName], None] | None = None, *,
                 token: JobToken | None = None, tls: TlsConfig | None = None, caller: str = "") -> None:
        self.cluster = cluster
        self.startup_grace = startup_grace
        self._peers: dict[TaskName, Peer] = {}
        #: the incarnation each peer that ran and was lost ran as, until it answers again
        self._left: dict[TaskName, int] = {}
        self._on_lost = on_lost
        self._token = token
        self._caller = caller
        self._credentials = tls.channel_credentials() if tls is not None else None

    def peer(self, task: TaskName) -> Peer:
        peer = self._peers.get(task)
        if peer is None:
            peer = self._peers[task] = Peer(task, self.cluster.address(task), self._token,
                                            self._credentials, self._caller)
        return peer

    async def handshake(self, task: TaskName) -> pb.GetStatusResponse:
        """The peer's status, waiting up to the start-up grace period for it to come up. A
        peer that ran and was lost (:meth:`lost`) is not waited for so: UnavailableError
        once it refused connections for REFUSALS_SECONDS on end, or did not answer within
        RECONNECT_SECONDS."""
        peer = self.peer(task)
        if peer.status is not None:
            return peer.status
        if peer._handshake is None or peer._handshake.done():
            peer._handshake = shared_task(self._get_status(peer))
        return await asyncio.shield(peer._handshake)

    def answered(self, task: TaskName) -> bool:
        """Whether ``task`` answered a handshake and was not lost since."""
        peer = self._peers.get(task)
        return peer is not None and peer.status is not None

    async def reach(self, task: TaskName, within: float) -> None:
        """Return once ``task`` answered a handshake; UnavailableError if it did not within
        ``within`` seconds (its handshake goes on, for the calls that wait longer)."""
        try:
            await asyncio.wait_for(self.handshake(task), within)
        except asyncio.TimeoutError:
            raise UnavailableError(f"{self.peer(task)} did not answer within {within:g} s") from None

    async def serve_relayed(self, task: TaskName, tag: str, receiver: TaskName, within: float) -> bool:
        """Ask ``task``, a receiver of relay ``tag`` of this task's, to offer its tensor to
        ``receiver`` (ServeRelayed): whether it did. A TensorverbsError if it did not
        answer within ``within`` seconds or failed."""
        request = pb.ServeRelayedRequest(host_name=self._caller, tag=tag, receiver=str(receiver))
        peer = self.peer(task)
        try:
            reply = await peer.serve_relayed(request, timeout=within)
        except grpc.aio.AioRpcError as exc:
            raise from_rpc_error(exc, str(peer)) from None
        return reply.served

    async def _get_status(self, peer: Peer) -> pb.GetStatusResponse:
        loop = asyncio.get_running_loop()
        left = self._left.get(peer.task)
        window = self.startup_grace if left is None else min(self.startup_grace, RECONNECT_SECONDS)
        deadline = loop.time() + window
        refused_since: float | None = None
        gone_since: float | None = None  # (refused connections, of a peer that left)
        try_seconds = RETRY_SECONDS
        # alternately a call that waits (briefly) for the channel to connect, and one that
        # does not, which fails at once with the reason it cannot connect
        for waits in itertools.cycle((True, False)):
            try:
                status = await peer.get_status(
                    pb.GetStatusRequest(), wait_for_ready=waits,
                    timeout=max(0.0, min(try_seconds, deadline - loop.time())))
                break
            except grpc.aio.AioRpcError as exc:
                if exc.code() not in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE):
                    raise from_rpc_error(exc, str(peer)) from None
                try_seconds = _next_try(peer, exc, try_seconds)
                now = loop.time()
                if not waits:
                    why = refusal(exc.details() or "")
                    if why is None:
                        refused_since = None
                    else:
                        refused_since = now if refused_since is None else refused_since
                        if now - refused_since >= REFUSAL_SECONDS:
                            raise UnauthenticatedError(f"{peer}: {why}") from None
                    if left is not None and "connection refused" in (exc.details() or "").lower():
                        gone_since = now if gone_since is None else gone_since
                        if now - gone_since >= REFUSALS_SECONDS:
                            raise UnavailableError(f"{peer} is gone: it ran (incarnation {left:016x}) and "
                                                   "refuses connections now") from None
                    else:
                        gone_since = None
                if now >= deadline:
                    raise UnavailableError(
                        f"{peer} did not answer within the start-up grace period of {window:g} s" if left is None
                        else f"{peer} is gone: it ran (incarnation {left:016x}) and has not answered again "
                             f"for {window:g} s") from None
        peer.status = status
        self._left.pop(peer.task, None)
        return status

    async def answers_again(self, task: TaskName, incarnation: int, within: float = RECONNECT_SECONDS,
                            refusals_for: float = 0.0) -> str | None:
        """After a call's connection to ``task`` broke: None once the peer answers as
        ``incarnation`` again (its channel reconnects meanwhile), else why it is taken
        as gone (it restarted, refused connections for ``refusals_for`` seconds on end,
        did not answer ``within`` seconds, or did not answer again within
        RECONNECT_SECONDS of a connection, seen up meanwhile, breaking: a peer slow to
        answer keeps its connection, a vanished host loses it to the keepalive)."""
        peer = self.peer(task)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        gone = f"it did not answer again within {within:g} s"
        connected = False
        refused_since: float | None = None
        try_seconds = RETRY_SECONDS
        # as in the handshake, alternately a call that waits for the channel to connect and
        # one that fails at once with the reason it cannot
        for waits in itertools.cycle((False, True)):
            remaining = deadline - loop.time()
            if remaining <= 0:
                return gone
            try:
                status = await peer.get_status(pb.GetStatusRequest(), wait_for_ready=waits,
                                               timeout=min(try_seconds, remaining))
                break
            except grpc.aio.AioRpcError as exc:
                details = exc.details() or exc.code().name
                if exc.code() not in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE):
                    return f"reaching it again failed: {details}"
                try_seconds = _next_try(peer, exc, try_seconds)
                if peer.channel.get_state() == grpc.ChannelConnectivity.READY:
                    connected = True
                elif connected:
                    connected = False
                    if loop.time() + RECONNECT_SECONDS < deadline:
                        deadline = loop.time() + RECONNECT_SECONDS
                        gone = f"its connection broke and it did not answer again within {RECONNECT_SECONDS:g} s"
                if "connection refused" in details.lower():
                    refused_since = loop.time() if refused_since is None else refused_since
                    if loop.time() - refused_since >= refusals_for:
                        return "it refused the connection: its process is gone"
                elif not waits:
                    refused_since = None
        return restarted(status, incarnation)

    async def held(self, task: TaskName, receiver: TaskName, name: str, step_id: int) -> str:
        """What ``task`` holds for ``receiver`` under ``name`` (or close to it at
        ``step_id``), for the message of a recv of it that timed out: ": ..." to append, or
        "" if it does not tell within HELD_SECONDS."""
        try:
            held = await self.peer(task).get_held_tensors(
                pb.GetHeldTensorsRequest(receiver=str(receiver), name=name, step_id=step_id), timeout=HELD_SECONDS)
        except grpc.aio.AioRpcError:
            return ""
        steps = ", ".join(str(step) for step in held.steps)
        said = (f": {task} holds {name!r} for this task at step{'s' if len(held.steps) > 1 else ''} {steps}"
                if steps else f": {task} holds no tensor named {name!r} for this task")
        if held.names:
            said += f"; at step {step_id} it holds {', '.join(repr(close) for close in held.names)}"
        return said

    async def forget(self, task: TaskName) -> None:
        """Close the channel to ``task`` (it moved, or left): the next call to it dials its
        address in the cluster afresh."""
        self._left.pop(task, None)
        peer = self._peers.pop(task, None)
        if peer is not None:
            await peer.channel.close()

    def lost(self, task: TaskName, incarnation: int | None = None) -> None:
        """Forget a peer's status after it failed; the next call does a fresh handshake, of a
        peer that ran (as ``incarnation``, or as its status said) and left."""
        peer = self._peers.get(task)
        status = peer.status if peer is not None else None
        if incarnation is None and status is not None:
            incarnation = status.incarnation
        if incarnation is not None:
            self._left[task] = incarnation
        if peer is not None and peer.status is not None:
            peer.status = None
            if self._on_lost is not None:
                self._on_lost(task)

    async def close(self) -> None:
        await asyncio.gather(*(p.channel.close() for p in self._peers.values()),
                             return_exceptions=True)
        self._peers.clear()
