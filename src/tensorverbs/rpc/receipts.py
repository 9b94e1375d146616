"""What a task owes the senders of its RecvTensor calls (the "grpc" protocol): its word on
each call whose tensor the sender may hold (:mod:`.confirmations`), until the sender has
it. Taken: the tensor arrived whole and is this task's. Dropped: the call ended without
it (its connection broke before the last byte, its recv gave up, it was cancelled).

The word usually goes in the call itself (the confirmation). When the call did not end
as the sender's answer to it, the word is owed to that incarnation of the sender, and
goes in SettleRecvTensors calls, made again (once the sender answers again, after a pause)
until one is answered, for as long as the sender does not restart, refuse the words for
good (an invalid call, a refused proof), or stay without an answer for SETTLE_SECONDS. At stop, the words owed get one last call of
at most LAST_SECONDS. All methods run on the task's event loop.
"""
from __future__ import annotations

import asyncio
import dataclasses

import grpc

from ..cluster import TaskName
from . import tensorverbs_pb2 as pb
from .options import RECONNECT_SECONDS
from .peers import Peers

#: how long the words for a sender that does not answer are kept: then the tensors it
#: holds for this task stay held there (its flush() waits for them; its stop() names them)
SETTLE_SECONDS = 600.0
#: the pause before a word refused for a reason that may pass is sent again
PAUSE_SECONDS = 1.0
#: how long stop() gives the words owed to reach their senders
LAST_SECONDS = 0.5
#: the most words owed to one incarnation of a sender; beyond, words "taken" are forgotten
#: first (their senders keep those tensors held), then the oldest
MAX_OWED = 1 << 16
#: the most words one SettleRecvTensors carries
PER_CALL = 1024
#: codes of a SettleRecvTensors the sender will refuse again, whenever it is made
_FOR_GOOD = (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.UNAUTHENTICATED,
             grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNIMPLEMENTED)

#: an incarnation of a sender
Sender = tuple[TaskName, int]


@dataclasses.dataclass
class _Owed:
    """The words owed to one incarnation of a sender (dicts as ordered sets)."""

    taken: dict[int, None] = dataclasses.field(default_factory=dict)
    dropped: dict[int, None] = dataclasses.field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.taken) + len(self.dropped)

    def next_call(self) -> pb.SettleRecvTensorsRequest:
        """The words of the next SettleRecvTensors."""
        taken = list(self.taken)[:PER_CALL]
        return pb.SettleRecvTensorsRequest(taken=taken, dropped=list(self.dropped)[:PER_CALL - len(taken)])

    def settled(self, call: pb.SettleRecvTensorsRequest) -> None:
        for request_id in call.taken:
            self.taken.pop(request_id, None)
        for request_id in call.dropped:
            self.dropped.pop(request_id, None)


class Receipts:
    """The words this task owes its senders, and the calls that settle them."""

    def __init__(self, peers: Peers) -> None:
        self._peers = peers
        self._owed: dict[Sender, _Owed] = {}
        self._settling: dict[Sender, asyncio.Task] = {}
        self._closed = False

    def owe(self, sender: TaskName, incarnation: int, request_id: int, taken: bool) -> None:
        """Owe ``sender`` (as ``incarnation``) the word on call ``request_id``."""
        if self._closed:
            return
        key = (sender, incarnation)
        owed = self._owed.setdefault(key, _Owed())
        (owed.taken if taken else owed.dropped)[request_id] = None
        while len(owed) > MAX_OWED:
            forgotten = owed.taken if owed.taken else owed.dropped
            del forgotten[next(iter(forgotten))]
        if key not in self._settling:
            self._settling[key] = asyncio.ensure_future(self._settle(key))

    def idle(self) -> bool:
        """Whether this task owes no word and makes no SettleRecvTensors."""
        return not self._owed and not self._settling

    async def close(self) -> None:
        """One last call of at most LAST_SECONDS for the words owed; owe nothing more."""
        self._closed = True
        owed, settling = dict(self._owed), list(self._settling.values())
        for task in settling:
            task.cancel()
        await asyncio.gather(*settling, return_exceptions=True)
        self._owed.clear()
        await asyncio.gather(*(self._peers.peer(sender).settle_recv_tensors(words.next_call(), timeout=LAST_SECONDS)
                               for (sender, _), words in owed.items()), return_exceptions=True)

    async def _settle(self, key: Sender) -> None:
        sender, incarnation = key
        loop = asyncio.get_running_loop()
        given_up = loop.time() + SETTLE_SECONDS
        owed = self._owed[key]
        try:
            while len(owed) and loop.time() < given_up:
                call = owed.next_call()
                try:
                    await self._peers.peer(sender).settle_recv_tensors(call, timeout=RECONNECT_SECONDS)
                except grpc.aio.AioRpcError as exc:
                    if exc.code() in _FOR_GOOD:
                        break  # it will not take the words
                    why = await self._peers.answers_again(sender, incarnation)
                    if why is not None and "restarted" in why:
                        break  # the tensors are gone with it
                    await asyncio.sleep(PAUSE_SECONDS)  # (it refuses connections, or took the words ill)
                    continue
                owed.settled(call)
                given_up = loop.time() + SETTLE_SECONDS
        finally:
            del self._settling[key]
            if self._owed.get(key) is owed:
                del self._owed[key]  # settled, or given up
