"""What a task owes the senders of its RecvTensor calls (the "grpc" protocol): its word on
each call whose tensor the sender may hold (:mod:`.confirmations`), until the sender has
it. Taken: the tensor arrived whole and is this task's. Dropped: the call ended without
it (its connection broke before the last byte, its recv gave up, it was cancelled).

The word usually goes in the call itself (the confirmation). When the call did not end
as the sender's answer to it, the word is owed, and goes in SettleRecvTensors calls made
again until the sender answers, however long it stalls, for as long as it is the same
incarnation (at most SETTLE_SECONDS without an answer). All methods run on the task's
event loop.
"""
from __future__ import annotations

import asyncio
import dataclasses

import grpc

from ..cluster import TaskName
from . import tensorverbs_pb2 as pb
from .errors import connection_broke
from .options import RECONNECT_SECONDS
from .peers import Peers

#: how long the word for a sender that does not answer is kept: then the tensors it holds
#: for this task stay held there (its flush() waits for them; its stop() names them)
SETTLE_SECONDS = 600.0
#: the most calls a sender is owed the word on; beyond, the oldest words are forgotten
MAX_OWED = 1 << 16
#: the most calls one SettleRecvTensors settles
PER_CALL = 1024


@dataclasses.dataclass
class _Owed:
    """The words owed to one incarnation of a sender (dicts as ordered sets)."""

    incarnation: int
    taken: dict[int, None] = dataclasses.field(default_factory=dict)
    dropped: dict[int, None] = dataclasses.field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.taken) + len(self.dropped)


class Receipts:
    """The words this task owes its senders, and the calls that settle them."""

    def __init__(self, peers: Peers) -> None:
        self._peers = peers
        self._owed: dict[TaskName, _Owed] = {}
        self._settling: dict[TaskName, asyncio.Task] = {}
        self._closed = False

    def owe(self, sender: TaskName, incarnation: int, request_id: int, taken: bool) -> None:
        """Owe ``sender`` (as ``incarnation``) the word on call ``request_id``."""
        if self._closed:
            return
        owed = self._owed.get(sender)
        if owed is None or owed.incarnation != incarnation:
            owed = self._owed[sender] = _Owed(incarnation)
        (owed.taken if taken else owed.dropped)[request_id] = None
        while len(owed) > MAX_OWED:
            oldest = owed.taken if owed.taken else owed.dropped
            del oldest[next(iter(oldest))]
        if sender not in self._settling:
            self._settling[sender] = asyncio.ensure_future(self._settle(sender))

    def owed(self) -> int:
        """How many words this task owes."""
        return sum(len(owed) for owed in self._owed.values())

    async def close(self) -> None:
        """Owe nothing more; stop settling."""
        self._closed = True
        settling = list(self._settling.values())
        for task in settling:
            task.cancel()
        await asyncio.gather(*settling, return_exceptions=True)
        self._owed.clear()

    async def _settle(self, sender: TaskName) -> None:
        loop = asyncio.get_running_loop()
        given_up = loop.time() + SETTLE_SECONDS
        try:
            while (owed := self._owed.get(sender)) is not None and len(owed):
                taken, dropped = list(owed.taken)[:PER_CALL], list(owed.dropped)[:PER_CALL - min(PER_CALL, len(owed.taken))]
                try:
                    await self._peers.peer(sender).settle_recv_tensors(
                        pb.SettleRecvTensorsRequest(taken=taken, dropped=dropped), timeout=RECONNECT_SECONDS)
                except grpc.aio.AioRpcError as exc:
                    if not (connection_broke(exc) or exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED):
                        break  # it refused: nothing to do but forget
                    why = await self._peers.answers_again(sender, owed.incarnation)
                    if why is not None and ("restarted" in why or "refused the connection" in why):
                        break  # the tensors are gone with it
                    if loop.time() > given_up:
                        break
                    continue
                for request_id in taken:
                    owed.taken.pop(request_id, None)
                for request_id in dropped:
                    owed.dropped.pop(request_id, None)
                given_up = loop.time() + SETTLE_SECONDS
            else:
                return
            if self._owed.get(sender) is owed:
                del self._owed[sender]
        finally:
            if self._settling.get(sender) is asyncio.current_task():
                del self._settling[sender]
                if not self._closed and sender in self._owed:  # (owed to its next incarnation meanwhile)
                    self._settling[sender] = asyncio.ensure_future(self._settle(sender))
