"""The receiving side of a relay broadcast (:class:`RelayReceiver`): a recv that got a
relay's descriptor follows it. It fetches the tensor from its parent (once the parent
answers; from the sender if the parent is gone) into the recv's own result, offers that to
its children at a step of the relay's own (which the receiver cleaning its step up does
not drop), confirms to the sender, and settles the recv. A recv that ends before its
tensor came leaves the descriptor here for the next recv of the key; a tensor that came
for a recv given up is kept for the next."""
from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..cluster import TaskName, parse_task
from ..devices import device_of, host_array
from ..errors import TensorverbsError, UnavailableError, as_error
from ..tensor import prepare
from .completion import Sends
from .key import RendezvousKey
from .recv_call import RecvCall, settle
from .relay_offers import HAVE_IT, NEED_IT, RelayOffers, Transport
from .relay_plan import RelayDescriptor, Relayed, ack_name

if TYPE_CHECKING:
    from .. import _core
    from ..rpc.loop import EventLoopThread
    from ..rpc.peers import Peers
    from .lanes import Lanes

log = logging.getLogger(__name__)

#: how long a receiver waits for its relay's parent to answer at all before it fetches the
#: tensor from the sender (a parent that ran and ended is not told from one not started)
REACH_SECONDS = 5.0
#: how long a receiver keeps what it passes on, that its children did not take, once its
#: step was cleaned up or aborted
PASS_ON_SECONDS = 60.0


@dataclass
class _Following:
    """A receiver's relay of one (origin, name, step): what to fetch, whether from the
    sender directly by now, and a tensor that came for a recv nobody waited for."""

    descriptor: RelayDescriptor
    origin: TaskName
    direct: bool = False
    kept: Any = None


@dataclass
class _PassedOn:
    """What a receiver passed on at a relay's own step (``step``), for the recv of ``at``:
    the completions of its children's sends, and when ``at`` was cleaned up."""

    step: int
    at: int
    completions: list["_core.SendCompletion"]
    cleaned: float | None = None


class RelayReceiver(RelayOffers):
    """The relays one task follows."""

    def __init__(self, task: TaskName, incarnation: int, sends: Sends, transport: Transport,
                 loop: "EventLoopThread", peers: "Peers", lanes: "Lanes") -> None:
        super().__init__(task, incarnation, sends, transport)
        self._loop, self._peers, self._lanes = loop, peers, lanes
        self._lock = threading.Lock()
        #: (origin, name, step) -> the relay a recv of it follows, until its tensor is taken
        self._following: dict[tuple[TaskName, str, int], _Following] = {}
        #: parents that did not answer -> when (time.monotonic()): not waited for again
        #: within REACH_SECONDS * 12 unless they answer meanwhile
        self._unanswered: dict[TaskName, float] = {}
        #: what this task passed on that its children may not have taken yet
        self._passed: list[_PassedOn] = []
        #: step -> the recvs of it fetching a relayed tensor, and their fetches (None while
        #: the parent is reached)
        self._fetching: dict[int, dict[RecvCall, concurrent.futures.Future | None]] = {}

    def followed(self) -> bool:
        """Whether a relay came for a recv whose tensor was not taken yet."""
        return bool(self._following)

    def following(self, key: RendezvousKey, step: int) -> _Following | None:
        """The relay a recv of ``key`` at ``step`` follows, if one came and its tensor was
        not taken yet."""
        if not self._following:
            return None
        with self._lock:
            return self._following.get((key.src, key.name, step))

    def follow(self, call: RecvCall, relayed: Relayed | _Following) -> None:
        """Fetch the tensor of the relay that came for ``call`` and settle it so."""
        if isinstance(relayed, Relayed):
            state = _Following(relayed.descriptor, relayed.origin)
            with self._lock:
                state = self._following.setdefault((relayed.origin, call.key.name, call.step_id), state)
        else:
            state = relayed
        if state.kept is not None:  # came for a recv given up
            self._taken(call, state)
            call.future.returnable(self._keep, call.key.name, call.step_id, state, state.kept)
            if not settle(call.future, None, state.kept):
                self._keep(call.key.name, call.step_id, state, state.kept)
            return
        with self._lock:  # (the fetch may be at the relay's own step: drop_step ends it)
            self._fetching.setdefault(call.step_id, {})[call] = None
        self._fetch(call, state)

    def _fetch(self, call: RecvCall, state: _Following) -> None:
        """Fetch ``call``'s tensor from the relay's parent, once it answers (from the sender
        if it does not within REACH_SECONDS: it may have ended)."""
        if not state.direct and state.descriptor.parent != str(state.origin):
            parent = parse_task(state.descriptor.parent)
            if not self._peers.answered(parent):
                since = self._unanswered.get(parent)
                if since is not None and time.monotonic() - since < REACH_SECONDS * 12:
                    ago = time.monotonic() - since
                    self._parent_gone(call, state, UnavailableError(f"{parent} did not answer {ago:.0f} s ago"))
                    return
                probe = self._loop.submit(self._peers.reach(parent, REACH_SECONDS))
                probe.add_done_callback(lambda p: self._lanes.run(str(state.origin), self._reached, call, state, p))
                return
        self._start(call, state)

    def _reached(self, call: RecvCall, state: _Following, probe: concurrent.futures.Future) -> None:
        error = probe.exception()
        if error is None:
            self._start(call, state)
        else:
            self._unanswered[parse_task(state.descriptor.parent)] = time.monotonic()
            self._parent_gone(call, state, error)

    def _parent_gone(self, call: RecvCall, state: _Following, error: BaseException) -> None:
        """Fetch ``call``'s tensor from the sender: the relay's parent is gone (``error``)."""
        log.info("%s: the relay's parent %s is gone (%s); fetching from %s", call.what, state.descriptor.parent,
                 error, state.origin)
        state.direct = True
        self._confirm(call.step_id, state, NEED_IT)
        self._start(call, state)

    def _start(self, call: RecvCall, state: _Following) -> None:
        descriptor = state.descriptor
        source = state.origin if state.direct else parse_task(descriptor.parent)
        name = descriptor.direct if state.direct else descriptor.data
        # the sender offers at the recv's step, a receiver at the relay's own
        step = call.step_id if source == state.origin else descriptor.step
        key = RendezvousKey(source, 0, self._task, name)
        try:
            fut = self._rendezvous.recv_async(key, step, call.time_left(), call.device, call.out)
        except TensorverbsError as exc:
            self._fetch_ended(call)
            settle(call.future, exc)
            return
        with self._lock:
            fetching = self._fetching.get(call.step_id, {})
            ended = call not in fetching  # its step ended meanwhile
            if not ended:
                fetching[call] = fut
        if ended:
            fut.cancel()
            return
        fut.add_done_callback(lambda f: self._fetched(call, state, f))

    def _fetch_ended(self, call: RecvCall) -> None:
        with self._lock:
            fetching = self._fetching.get(call.step_id, {})
            fetching.pop(call, None)
            if not fetching:
                self._fetching.pop(call.step_id, None)

    def _fetched(self, call: RecvCall, state: _Following, fut: concurrent.futures.Future) -> None:
        """The fetch of ``call``'s tensor ended: pass it on and confirm, fetch it from the
        sender if the parent is gone, or fail the recv (the relay kept for its next recv)."""
        if fut.cancelled():  # its step ended: drop_step failed the recv
            return
        error = fut.exception()
        origin, descriptor = state.origin, state.descriptor
        if isinstance(error, UnavailableError) and not state.direct and descriptor.parent != str(origin):
            self._parent_gone(call, state, error)  # (fetching still: from the sender now)
            return
        self._fetch_ended(call)
        if error is None:
            result = fut.result()
            try:
                self._pass_on(call.step_id, descriptor, result)
            finally:
                self._confirm(call.step_id, state, HAVE_IT)
            self._taken(call, state)
            try:
                call.future.returnable(self._keep, call.key.name, call.step_id, state, result)
                if settle(call.future, None, result):
                    return
            except ReferenceError:  # a parked recv's future, dropped
                pass
            self._keep(call.key.name, call.step_id, state, result)
            return
        settle(call.future, as_error(error, f"{call.what}: fetching the relayed tensor from "
                                            f"{origin if state.direct else descriptor.parent}"))

    def _pass_on(self, at: int, descriptor: RelayDescriptor, result: Any) -> None:
        """Offer ``result``, received at step ``at``, to ``descriptor``'s children under
        the relay's data name at its own step: kept until they take it, or PASS_ON_SECONDS
        after ``at`` is cleaned up."""
        if not descriptor.children:
            return
        array = prepare(host_array(result, device_of(result))[0])
        completions = []
        for child in descriptor.children:
            ticket = self._sends.open(f"a relayed tensor to {child} at step {at}")
            completions.append(ticket.completion)
            try:
                self.offer(descriptor.step, parse_task(child), descriptor.data, array, ticket=ticket)
            except TensorverbsError as exc:
                log.warning("passing a relayed tensor on to %s failed: %s", child, exc)
        with self._lock:
            self._passed.append(_PassedOn(descriptor.step, at, completions))
        self._sweep()

    def _confirm(self, step: int, state: _Following, what: int) -> None:
        """Tell the relay's sender that this task has its tensor (or needs it directly)."""
        name = ack_name(state.descriptor.tag, 1 if state.direct and what == HAVE_IT else 0)
        try:
            self.offer(step, state.origin, name, np.array([what], np.uint8))  # (flush waits not for it)
        except TensorverbsError as exc:
            log.warning("confirming a relayed tensor to %s failed: %s", state.origin, exc)

    def _keep(self, name: str, step: int, state: _Following, result: Any) -> None:
        """Keep ``result``, the tensor of ``state``, for the next recv of ``name`` at ``step``
        (its recv was given up, or gave it back)."""
        state.kept = result
        with self._lock:
            self._following[(state.origin, name, step)] = state

    def _taken(self, call: RecvCall, state: _Following) -> None:
        with self._lock:
            if self._following.get((state.origin, call.key.name, call.step_id)) is state:
                del self._following[(state.origin, call.key.name, call.step_id)]

    def holds(self) -> bool:
        """Whether this task follows a relay, or holds what it passed on."""
        return bool(self._following or self._passed or self._fetching)

    def drop_step(self, step: int, error: TensorverbsError) -> None:
        """Forget the relays followed at ``step`` (cleaned up or aborted: ``error``): the
        recvs fetching a relayed tensor fail; what was passed on stays a while."""
        with self._lock:
            for at in [at for at in self._following if at[2] == step]:
                del self._following[at]
            fetching = self._fetching.pop(step, {})
            for passed in self._passed:
                if passed.at == step and passed.cleaned is None:
                    passed.cleaned = time.monotonic()
        for call, fut in fetching.items():
            settle(call.future, error)
            if fut is not None:
                fut.cancel()
        self._sweep()

    def _sweep(self) -> None:
        """Clean up the relays' own steps of what this task passed on that its children
        took, or did not within PASS_ON_SECONDS of the step it came at being cleaned up."""
        now, done, kept = time.monotonic(), list[_PassedOn](), list[_PassedOn]()
        with self._lock:
            for passed in self._passed:
                taken = all(completion.outcome() is not None for completion in passed.completions)
                late = passed.cleaned is not None and now - passed.cleaned >= PASS_ON_SECONDS
                (done if taken or late else kept).append(passed)
            self._passed = kept
        for passed in done:
            self._rendezvous.cleanup_step(passed.step)
