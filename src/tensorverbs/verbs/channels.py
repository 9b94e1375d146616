"""Verbs channels set up over gRPC, and watched through it (the control-plane half of
TensorFlow's RdmaMgr).

A channel is set up on first use, or when the peer asks first: this side has the native
core make its side of the channel and calls the peer's GetRemoteAddress with its
description; the peer connects its side to ours and answers with its own description,
which we connect to. Both sides may do this at once; the exchange is idempotent. The call
retries through the peer's start-up like any first call to it and ends in
UnavailableError naming the peer. A task that joined at run time (``Server.add_task``) may
ask before this task has learned it: while this task has room for joining tasks, the
set-up waits for it up to the start-up grace period. Once connected, the peer's liveness
is watched through the standard gRPC health service: a peer that dies fails its channel
at once, one that cannot be reached fails it within the liveness timeout (a connection
that broke is given the reconnect window to come back). With a job token, only the job's tasks reach the set-up
(:mod:`tensorverbs.rpc.auth`): nobody else can replace a channel or learn its incarnation.

A channel that broke under the transport (its queue pair gave up retransmitting on a lossy
fabric, or the peer's side of it was closed) is set up again at once: the core holds the
recvs that were pending on it and asks again on the new channel, and the peer's side,
replaced, does the same with its own. If it cannot be set up again, its recvs fail with
UnavailableError naming the peer.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from typing import TYPE_CHECKING

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ..cluster import TaskName, parse_task
from ..errors import Code, UnavailableError
from ..native_waits import end_at_exit
from ..rpc import tensorverbs_pb2 as pb
from ..rpc.errors import connection_broke, from_rpc_error
from ..rpc.loop import shared_task
from ..rpc.options import SERVICE
from ..rpc.peer_threads import PeerThreads
from ..rpc.peers import REFUSALS_SECONDS, protocol_mismatch, restarted

if TYPE_CHECKING:
    from .. import _core
    from ..runtime import TaskRuntime
    from .task_ids import TaskIds

log = logging.getLogger(__name__)

#: native set-up calls of one peer that run at once: what this side's set-up and the peer's,
#: crossing, run together, with room for a set-up given up whose call still runs
SETUPS_PER_PEER = 4


class VerbsChannels:
    """Sets up and watches the channels of one task's native rendezvous ``core``."""

    def __init__(self, rt: "TaskRuntime", core: "_core.Rendezvous", ids: "TaskIds") -> None:
        self.rt, self.core, self.ids = rt, core, ids
        self._setups: dict[TaskName, asyncio.Future] = {}
        self._watches: dict[tuple[TaskName, int], asyncio.Future] = {}
        #: the incarnation of each peer whose channel was connected last
        self._incarnations: dict[TaskName, int] = {}
        #: peers whose latest channel failed, or that came back as another incarnation:
        #: where they are is unsure until they are learned again
        self._unsure: set[TaskName] = set()
        #: the incarnation each peer that came back as another (it called) had before: the
        #: one whose channel a move fails (a move learned later must spare the new one's)
        self._before: dict[TaskName, int] = {}
        #: (incarnation, address) of each peer that set a channel up and said where it serves
        self._serves_at: dict[TaskName, tuple[int, str]] = {}
        self._restarts = threading.Lock()  # a move's failing vs. a new incarnation calling
        #: where the native sides of channels are made and connected (a connect may dial the
        #: peer for seconds): a few of one peer's at once (both sides may set the channel up
        #: at the same time, each making and connecting its side), none waiting for another's
        self._threads = PeerThreads("tv-setup", SETUPS_PER_PEER)
        follower = threading.Thread(target=self._follow_lost, name="tv-lost-channels", daemon=True)
        follower.start()
        end_at_exit(follower, core.end_lost)

    def unsure(self, peer: TaskName) -> bool:
        """Whether ``peer``'s latest channel failed, or it set one up as another
        incarnation than before (it may have restarted elsewhere)."""
        return peer in self._unsure

    def gone(self, peer: TaskName) -> bool:
        """Whether ``peer``'s latest channel failed and none replaced it."""
        return peer in self._unsure and not self.core.ready(self.ids[peer])

    def setting_up(self) -> int:
        """How many set-ups are under way (on any thread)."""
        return sum(not setup.done() for setup in list(self._setups.values()))

    def learned(self, peer: TaskName) -> None:
        """``peer``'s address was (learned) again."""
        self._unsure.discard(peer)

    def forget(self, peer: TaskName) -> None:
        """``peer`` left the cluster."""
        self._unsure.discard(peer)
        self._incarnations.pop(peer, None)
        self._before.pop(peer, None)
        self._serves_at.pop(peer, None)

    def _describe(self, description: bytes) -> dict:
        return dict(host_name=str(self.rt.task), incarnation=self.rt.incarnation,
                    channel=pb.Channel(provider=self.core.provider, provider_info=description))

    # -- this side starts ---------------------------------------------------------------
    async def connect(self, peer: TaskName) -> None:
        """Until the channel to ``peer`` is connected, setting it up if needed (on the loop).
        A set-up that :meth:`moved` gave up is followed by one at the peer's new address;
        one that failed ends the wait, unless the peer set the channel up meanwhile."""
        pid = self.ids[peer]
        while not self.core.ready(pid):
            setup = self._setups.get(peer)
            if setup is None or setup.done():
                setup = self._setups[peer] = shared_task(self._setup(peer))
            try:
                await asyncio.shield(setup)
                return
            except asyncio.CancelledError:
                if not setup.cancelled():
                    raise  # this wait was cancelled, not the set-up
                failure: Exception = UnavailableError(f"setting up the verbs channel to {peer} was given up")
            except Exception as exc:
                failure = exc
            if self._setups.get(peer) is setup and not self.core.ready(pid):
                raise failure  # (a set-up that moved() replaced is followed by the next)

    def fail_moved(self, peer: TaskName, why: str) -> None:
        """``peer`` is at another address now (on any thread): the channel to its old
        incarnation fails, and so do the recvs held for it; one that the peer set up from
        the new address (it called before this task learned the move) stays. A peer whose
        channel never connected has none to fail."""
        with self._restarts:
            before = self._before.pop(peer, None)
            if before is None:
                before = self._incarnations.get(peer)
                if before is not None and self._serves_at.get(peer) == (before, self.rt.cluster.address(peer)):
                    return  # it called from where it moved to
            if before is None:
                return
            if self._incarnations.get(peer) == before:
                del self._incarnations[peer]  # an incarnation that calls from now on is the new one
            self.core.fail_channel(self.ids[peer], int(Code.UNAVAILABLE), why, incarnation=before)

    async def moved(self, peer: TaskName) -> None:
        """``peer`` is at another address now (on the loop): a set-up under way at its old
        one is given up, and those who waited for it wait for one at the new address; the
        gRPC channel to the old one closes (any call from now on dials the new), and the
        health of a channel the peer set up from there is watched through the new."""
        setup = self._setups.pop(peer, None)
        if setup is not None:
            setup.cancel()
        incarnation = self._incarnations.get(peer)
        watch = self._watches.pop((peer, incarnation), None) if incarnation is not None else None
        if watch is not None:
            watch.cancel()  # (its stream goes through the old gRPC channel)
        await self.rt.peers.forget(peer)
        if (incarnation is not None and self._incarnations.get(peer) == incarnation and peer in self.ids
                and self.core.ready(self.ids[peer])):
            self._watch(peer, incarnation, where_known=True)

    async def _setup(self, peer: TaskName) -> None:
        peers, pid = self.rt.peers, self.ids[peer]
        status = await peers.handshake(peer)
        mismatch = protocol_mismatch(status, peer, self.rt.task, self.rt.protocol)
        if mismatch is not None:
            raise mismatch
        mine = await self._threads.run(str(peer), self.core.channel, pid, status.incarnation, b"")
        stub = peers.peer(peer)
        try:
            reply = await stub.get_remote_address(pb.GetRemoteAddressRequest(
                **self._describe(mine), address=self.rt.cluster.address(self.rt.task)))
        except grpc.aio.AioRpcError as exc:
            peers.lost(peer)
            raise from_rpc_error(exc, str(stub)) from None
        why = restarted(reply, status.incarnation)  # since its status was asked
        if why is not None:
            peers.lost(peer, status.incarnation)
            raise UnavailableError(f"{peer} answered the verbs channel's set-up as another process: {why}")
        await self._threads.run(str(peer), self.core.connect, pid, status.incarnation,
                                reply.channel.provider_info)
        self._watch(peer, status.incarnation, where_known=True)
        self.learned(peer)  # it answered at its address
        log.info("%s: verbs channel to %s connected (%s)", self.rt.task, peer, self.core.provider)

    # -- the peer starts ------------------------------------------------------------------
    async def handle_setup(self, request: pb.GetRemoteAddressRequest) -> pb.GetRemoteAddressResponse:
        """GetRemoteAddress (on the event loop): connect our side to the caller's."""
        peer = parse_task(request.host_name)
        # a task that joined at run time may call before this task has learned it
        pid = await self.ids.wait_for(peer, self.rt.peers.startup_grace)
        offered, incarnation = request.channel.provider_info, request.incarnation
        with self._restarts:
            known = self._incarnations.get(peer, incarnation)
            if known != incarnation:
                self._unsure.add(peer)  # it restarted, maybe elsewhere
                self._before[peer] = known
            if request.address:  # (a peer of an older version says nothing of it)
                self._serves_at[peer] = (incarnation, request.address)
        mine = await self._threads.run(str(peer), self.core.channel, pid, incarnation, offered)
        await self._threads.run(str(peer), self.core.connect, pid, incarnation, offered)
        self._watch(peer, incarnation)
        return pb.GetRemoteAddressResponse(**self._describe(mine))

    # -- channels that broke ----------------------------------------------------------------
    def _follow_lost(self) -> None:
        """Each peer whose channel broke under the transport is set up again (a thread of its
        own, waiting in the core with the GIL released; it ends when the core stops)."""
        while (pid := self.core.next_lost(-1)) is not None:
            try:
                self.rt.loop.submit(self._set_up_again(self.ids.task(pid), pid))
            except Exception as exc:  # the peer left, or the loop stopped: its recvs end
                self.core.fail_channel(pid, int(Code.UNAVAILABLE),
                                       f"{self.ids.named(self.ids.core_names[pid])}: its verbs channel broke "
                                       f"and is not set up again ({exc})")

    async def _set_up_again(self, peer: TaskName, pid: int) -> None:
        """Set the broken channel to ``peer`` up again; failing that, fail the recvs it holds."""
        log.info("%s: the verbs channel to %s closed (its task stopped, or the transport broke); "
                 "setting it up again", self.rt.task, peer)
        # its status is asked afresh: a new process of it (a quick restart) gets a channel of
        # its own incarnation, and the recvs held for the last fail (the core compares them)
        self.rt.peers.lost(peer, self._incarnations.get(peer))
        try:
            await self.connect(peer)
        except Exception as exc:
            if self.core.ready(pid):  # the peer set it up meanwhile: the held recvs went there
                return
            self._lose(peer, pid, f"its verbs channel broke and setting it up again failed ({exc})")

    def _lose(self, peer: TaskName, pid: int, why: str, incarnation: int | None = None) -> None:
        """``peer``'s channel failed and none replaces it (its health watch ended, or setting
        it up again failed, whichever comes first): its recvs fail with ``why``, and where
        it is is unsure (a task that joined at run time is then gone, its id free).
        ``incarnation``: the channel only if it is still to that one."""
        self._unsure.add(peer)
        self.rt.peers.lost(peer, self._incarnations.get(peer) if incarnation is None else incarnation)
        self.core.fail_channel(pid, int(Code.UNAVAILABLE), f"{peer} is unavailable: {why}",
                               incarnation=incarnation)

    # -- liveness -------------------------------------------------------------------------
    def _watch(self, peer: TaskName, incarnation: int, where_known: bool = False) -> None:
        """Fail the channel to ``peer`` when its health stream ends (on the event loop), if
        it is still the channel to that incarnation: a later one (the peer restarted) is
        not the watch's. Its peer is then :meth:`unsure`.

        The stream opens once the peer answers a GetStatus with the channel's incarnation,
        within the start-up grace period. ``where_known``: the peer was up a moment ago at
        the address this task knows, on a gRPC channel that is connected or new (it
        answered the set-up there, or the move to it was just learned), and connections
        refused for REFUSALS_SECONDS mean it ended as the watch began. Otherwise (the peer
        set the channel up) a refusal proves nothing: this side's gRPC channel to it may
        report an attempt made before the peer was up until it connects again (its
        backoff, then a connection attempt of up to seconds), and the address known may be
        one the peer left (it restarted elsewhere, and the move is learned later)."""
        key = (peer, incarnation)
        self._incarnations[peer] = incarnation
        if key in self._watches and not self._watches[key].done():
            return
        stub = self.rt.peers.peer(peer)
        health = health_pb2_grpc.HealthStub(stub.channel)

        async def watch() -> None:
            try:
                if where_known:
                    why = await self.rt.peers.answers_again(peer, incarnation, self.rt.peers.startup_grace,
                                                            REFUSALS_SECONDS)
                else:
                    status = await stub.get_status(pb.GetStatusRequest(), timeout=self.rt.peers.startup_grace,
                                                   wait_for_ready=True)
                    why = restarted(status, incarnation)
                if why is None:
                    self._answers_where_known(peer, incarnation)
                    why = await self._stream_health(peer, incarnation, health)
            except grpc.aio.AioRpcError as exc:
                why = exc.details() or exc.code().name
            except asyncio.CancelledError:
                return
            except Exception as exc:
                why = f"watching it failed ({type(exc).__name__}: {exc})"
            if self._incarnations.get(peer) != incarnation or peer not in self.ids:
                return  # the channel is another incarnation's now, or the peer left
            self._lose(peer, self.ids[peer], why, incarnation)
        self._watches[key] = asyncio.ensure_future(watch())

    def _answers_where_known(self, peer: TaskName, incarnation: int) -> None:
        """``peer`` answered as ``incarnation`` at the address this task knows it at: no
        move of it is left to learn, and the incarnation it had before is forgotten (a
        later move fails the channel to this one)."""
        with self._restarts:
            if self._incarnations.get(peer) == incarnation:
                self._before.pop(peer, None)

    async def _stream_health(self, peer: TaskName, incarnation: int,
                             health: health_pb2_grpc.HealthStub) -> str:
        """Follow ``peer``'s health stream until the peer is gone: why it is. A stream
        whose connection broke is opened again once the peer answers as ``incarnation``
        within the reconnect window (a short outage does not fail the channel)."""
        while True:
            try:
                async for _ in health.Watch(health_pb2.HealthCheckRequest(service=SERVICE)):
                    pass
                return "its health stream ended"
            except grpc.aio.AioRpcError as exc:
                if not connection_broke(exc):
                    raise
                why = await self.rt.peers.answers_again(peer, incarnation)
                if why is not None:
                    return f"{exc.details() or exc.code().name}; {why}"

    def close(self) -> None:
        """Stop watching and setting up (on any thread)."""
        for watch in list(self._watches.values()):
            self.rt.loop.call_soon(watch.cancel)
        self._threads.close()

