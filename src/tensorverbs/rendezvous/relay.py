"""Relay broadcast: one tensor to many receivers, each passing it on to the next, so the
sender's link carries its bytes about once, whatever the number of receivers.

The sender (:class:`~.relay_sender.RelaySender`) offers each receiver a :class:`RelayDescriptor`
under the tensor's own key and the tensor itself to the receivers at the top of the
relay's tree (a chain by default), under the relay's data name. A receiver's recv of the
key gets the descriptor and follows it (:class:`~.relay_receiver.RelayReceiver`): it fetches the tensor
from its parent into the recv's own result (``out=``, a device, as any recv), offers
that result to its children under the data name, confirms to the sender and settles
the recv. Everything moves as ordinary passive sends and recvs of the protocol the task
runs, so a parent that has not got the tensor yet simply holds its child's request:
the relay is pipelined at tensor granularity, and within a large tensor at the
granularity of its parts (:mod:`.relay_parts`).

Late receivers (``late``): a task that asks for the tensor after the broadcast, not
among its receivers, is served by a receiver that has it (a replica), so that the
sender's link stays idle; by the sender while none has it.

Failures: a receiver whose parent is gone (UnavailableError) tells the sender, which
offers it the tensor directly; the sender's handle completes for each receiver as its
confirmation comes and fails, naming it, for a receiver that died or never confirmed.
A recv that ends before its tensor came (its deadline, a cancel) leaves the descriptor
here, so the next recv of the key fetches it again; a tensor that came for a recv
nobody waits for any more is kept for the next recv of its key.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from ..cluster import TaskName
from ..errors import AbortedError
from .completion import SendHandle, Sends
from .key import RendezvousKey
from .recv_call import RecvCall
from .relay_offers import Transport
from .relay_receiver import RelayReceiver
from .relay_sender import RelaySender

if TYPE_CHECKING:
    from ..rpc.loop import EventLoopThread
    from ..rpc.peers import Peers
    from .lanes import Lanes


class Relays:
    """The relay broadcasts of one task: those it sends (:class:`RelaySender`) and those
    it follows (:class:`RelayReceiver`)."""

    def __init__(self, task: TaskName, incarnation: int, loop: "EventLoopThread", peers: "Peers",
                 lanes: "Lanes", sends: Sends, transport: Transport) -> None:
        self._sender = RelaySender(task, incarnation, sends, transport, loop, peers)
        self._receiver = RelayReceiver(task, incarnation, sends, transport, loop, peers, lanes)
        self.followed, self.following = self._receiver.followed, self._receiver.following

    def broadcast(self, name: str, array: np.ndarray, keys: Sequence[RendezvousKey], step: int,
                  fanout: int, late: bool = False) -> SendHandle:
        """Offer ``array`` as ``name`` to each receiver of ``keys`` by relay, ``fanout``
        children per receiver in their order (and to tasks that ask for it later if
        ``late``); its handle completes per receiver as each confirms."""
        return self._sender.broadcast(name, array, keys, step, fanout, late)

    def serve(self, origin: str, tag: str, receiver: str) -> bool:
        """ServeRelayed: offer ``receiver`` the tensor of ``origin``'s relay ``tag`` that
        this task kept for late receivers; False if it does not keep it."""
        return self._receiver.serve(origin, tag, receiver)

    def follow(self, call: RecvCall, relayed: Any) -> None:
        """Fetch the tensor of the relay that came for ``call`` (a
        :class:`~.relay_plan.Relayed`, or what :meth:`following` returned) and settle it so."""
        self._receiver.follow(call, relayed)

    def drop_step(self, step: int, aborted: str | None = None) -> None:
        """Forget the relays of ``step``, cleaned up (or ``aborted``, saying so): those sent
        fail for each receiver that did not confirm yet, the recvs fetching a relayed
        tensor fail (AbortedError); what was passed on stays a while."""
        if self._sender.holds() or self._receiver.holds():  # (most steps of most tasks: neither)
            error = AbortedError(aborted or f"step {step} was cleaned up before its receiver took it")
            self._sender.drop_step(step, error)
            self._receiver.drop_step(step, error)
