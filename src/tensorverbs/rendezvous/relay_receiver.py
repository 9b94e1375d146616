"""The receiving side of a relay broadcast (:class:`RelayReceiver`): a recv that got a
relay's descriptor follows it. It fetches the tensor from its parent (once the parent
answers; from the sender if the parent is gone) into the recv's own result, offers that to
its children at a step of the relay's own (which the receiver cleaning its step up does
not drop), confirms to the sender, and settles the recv. A large tensor comes in parts
(:mod:`.relay_parts`), each offered to the children as it lands. A recv that ends before
its tensor came leaves the descriptor (and the parts landed) here for the next recv of the
key; a tensor that came for a recv given up is kept for the next. Of a relay that serves
late receivers, each receiver keeps what it got (:mod:`.relay_replicas`) and offers it to
a late receiver when the sender asks (:meth:`RelayReceiver.serve`)."""
from __future__ import annotations

import concurrent.futures
import functools
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..cluster import TaskName, parse_task
from ..devices import HOST, device_of, host_array
from ..errors import NotFoundError, TensorverbsError, UnavailableError, as_error
from ..out import Out
from ..tensor import prepare
from .completion import Sends
from .key import RendezvousKey
from .future import add_internal_callback
from .recv_call import RecvCall, settle
from .relay_offers import HAVE_IT, NEED_IT, RelayOffers, Transport
from .relay_parts import Landing, PartFetch, result_of
from .relay_plan import RelayDescriptor, Relayed, ack_name, is_relay, part_name, pieces, served_step
from .relay_replicas import Replica, Replicas

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
#: a late receiver's copy is kept a second longer per this many bytes of it (a large one
#: over a slow link)
SERVE_BYTES_PER_SECOND = 100e6


@dataclass
class _Following:
    """A receiver's relay of one (origin, name, step): what to fetch, whether from the
    sender directly by now, a tensor that came for a recv nobody waited for, the parts
    landed of one that comes in parts, and what was passed on of it."""

    descriptor: RelayDescriptor
    origin: TaskName
    direct: bool = False
    kept: Any = None
    landing: Landing | None = None
    #: a copy of the ``out`` of a recv cancelled just after its tensor filled it, which is
    #: kept for the next recv and passed on (the cancelled one's caller may use ``out`` again)
    out_copy: np.ndarray | None = None
    passed: "_PassedOn | None" = None
    #: its step was cleaned up or aborted (what it passes on from now is kept a while only)
    dropped: bool = False


@dataclass
class _PassedOn:
    """What a receiver passes on at a relay's own step (``step``), for the recv of ``at``:
    the parts offered, the completions of its children's sends (``offers`` in all once
    every part is offered), and when ``at`` was cleaned up."""

    step: int
    at: int
    offers: int
    parts: set[int] = field(default_factory=set)
    completions: list["_core.SendCompletion"] = field(default_factory=list)
    cleaned: float | None = None

    def taken(self) -> bool:
        """Whether every part was offered and each child took it (or failed to)."""
        return len(self.completions) == self.offers and all(c.outcome() is not None for c in self.completions)


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
        self._fetching: dict[int, dict[RecvCall, concurrent.futures.Future | PartFetch | None]] = {}
        #: the tensors of relays that serve late receivers, kept for them, and the sends of
        #: copies to them (not waited for by flush)
        self.replicas = Replicas()
        self._served = Sends(f"{task}'s late receivers")

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
        descriptor = state.descriptor
        if call.out is not None and not call.out.fits(descriptor.dtype, descriptor.shape):  # (asked again)
            settle(call.future, call.out.refusal(call.what, descriptor.dtype, descriptor.shape))
            return
        if descriptor.gone:
            self._taken(call, state)
            settle(call.future, NotFoundError(f"{call.what}: {state.origin} relayed it to other tasks, and neither "
                                              f"they nor {state.origin} keep it any more (they cleaned its step up, "
                                              f"or it changed since)"))
            return
        if call.out is not None and self.replicas:  # (what is kept there is overwritten)
            self.replicas.drop_sharing(call.out.landing)
        with self._lock:  # (taken once: a recv asked again at once beside waits for another)
            kept, state.kept = state.kept, None
        if kept is not None:  # came for a recv given up
            try:
                self._hand_over(call, state, kept)
            except BaseException:  # (a signal's: kept again unless call has it, which its future gives back)
                if not call.future.done():
                    self._keep(call.key.name, call.step_id, state, kept)
                raise
            return
        landing = state.landing
        if landing is not None and landing.complete():  # every part came, for a recv given up
            self._lanes.run(str(state.origin), self._landed, call, state, landing)
            return
        with self._lock:  # (the fetch may be at the relay's own step: drop_step ends it)
            self._fetching.setdefault(call.step_id, {})[call] = None
        self._fetch(call, state)

    def _hand_over(self, call: RecvCall, state: _Following, kept: Any) -> None:
        """Settle ``call`` with ``kept``, its tensor kept for it (kept again if making its
        result fails)."""
        self._taken(call, state)
        try:
            result = kept if call.out is None and call.device.name == device_of(kept).name else \
                result_of(host_array(kept, device_of(kept))[0], call)
        except Exception as exc:
            self._keep(call.key.name, call.step_id, state, kept)
            settle(call.future, as_error(exc, f"{call.what}: making the received tensor"))
            return
        self._deliver(call, state, result)

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
        if call.future.done():  # given up while its parent was reached: nothing is fetched into its out
            self._fetch_ended(call)
            return
        try:
            self._start_fetch(call, state)
        except Exception as exc:  # (the step ended, the peer is gone; no memory for the landing)
            self._fetch_ended(call)
            settle(call.future, as_error(exc, f"{call.what}: fetching the relayed tensor"))

    def _start_fetch(self, call: RecvCall, state: _Following) -> None:
        descriptor = state.descriptor
        source = state.origin if state.direct else parse_task(descriptor.parent)
        # the sender offers at the recv's step, a receiver at the relay's own (or at one of
        # its own for a late receiver)
        step = (call.step_id if source == state.origin
                else served_step(descriptor.tag, str(self._task)) if descriptor.served else descriptor.step)
        if descriptor.parts > 1 and not state.direct:
            self._start_parts(call, state, source, step)
            return
        key = RendezvousKey(source, 0, self._task, descriptor.direct if state.direct else descriptor.data)
        into_out = not (state.direct and descriptor.served)  # (a late receiver's: the sender may say that nobody keeps it)
        if into_out:
            fut = self._rendezvous.recv_async(key, step, call.time_left(), call.device, call.out, own=True)
        else:
            fut = self._rendezvous.recv_async(key, step, call.time_left(), own=True)
        if self._fetches(call, state, fut, into_out):
            fut.add_done_callback(lambda f: self._fetched(call, state, f))

    def _start_parts(self, call: RecvCall, state: _Following, source: TaskName, step: int) -> None:
        """Fetch the parts of ``call``'s tensor not landed yet from ``source`` at ``step``,
        passing each on as it lands."""
        if state.landing is None:
            state.landing = Landing.of(state.descriptor, call.out, self._rendezvous.allocate)
        landing, tag = state.landing, state.descriptor.tag

        def fetch(part: int) -> concurrent.futures.Future:
            key = RendezvousKey(source, 0, self._task, part_name(tag, part))
            return self._rendezvous.recv_async(key, step, call.time_left(), HOST, Out(landing.part(part)), own=True)

        def landed(part: int) -> None:
            if state.descriptor.children:
                self._offer_on(call.step_id, state, part_name(tag, part), landing.part(part), part)

        fetch_parts = PartFetch(landing, fetch, landed, functools.partial(self._parts_ended, call, state))
        if self._fetches(call, state, fetch_parts):
            fetch_parts.start()

    def _fetches(self, call: RecvCall, state: _Following, fetch: concurrent.futures.Future | PartFetch,
                 into_out: bool = False) -> bool:
        """Note ``fetch`` as ``call``'s, cancelled if ``call`` is (``into_out``: it fetches
        the whole tensor into ``call``'s result); False (the fetch cancelled) if its step
        ended meanwhile."""
        with self._lock:
            fetching = self._fetching.get(call.step_id, {})
            ended = call not in fetching
            if not ended:
                fetching[call] = fetch
        if ended:
            fetch.cancel()
        else:  # (in the thread that cancels it, before its cancel() returns)
            add_internal_callback(call.future, functools.partial(self._call_ended, call, state, fetch, into_out))
        return not ended

    def _call_ended(self, call: RecvCall, state: _Following, fetch: concurrent.futures.Future | PartFetch,
                    into_out: bool, fut: concurrent.futures.Future) -> None:
        """``call`` ended; if cancelled, its fetch stops before the cancel returns (a part or
        tensor on its way goes to the next recv of it), and what came of it is kept for the
        next recv, apart from its ``out``: its caller may use ``out`` again at once. A whole
        tensor that came just before is kept here (:meth:`_deliver` leaves it so), a copy if
        it filled ``out``; what it passes on is that copy."""
        if not fut.cancelled():
            return
        self._fetch_ended(call)
        if isinstance(fetch, PartFetch):
            fetch.cancel()
            return
        if fetch.cancel() or fetch.exception() is not None:  # (nothing came: the next recv fetches it)
            return
        result = fetch.result()
        if into_out and call.out is not None:
            state.out_copy = result = call.out.landing.copy()
        elif is_relay(result):  # (the sender's answer that nobody keeps it: _late_result)
            return
        self._keep(call.key.name, call.step_id, state, result)

    def _parts_ended(self, call: RecvCall, state: _Following, fetch: PartFetch) -> None:
        """Each fetch of ``call``'s parts ended: settle it with the whole tensor, fetch the
        rest from the sender if the parent is gone, or fail it (what landed kept)."""
        error = fetch.error()
        if error is None:
            self._fetch_ended(call)
            self._replicate(call, state, fetch.landing.array)
            self._confirm(call.step_id, state, HAVE_IT)
            self._lanes.run(str(state.origin), self._landed, call, state, fetch.landing)
        elif not self._parent_failed(call, state, error):
            self._fetch_ended(call)
            fetch.landing.detach()
            settle(call.future, as_error(error, f"{call.what}: fetching the relayed tensor from "
                                                f"{state.descriptor.parent}"))

    def _landed(self, call: RecvCall, state: _Following, landing: Landing) -> None:
        """Settle ``call`` with its tensor, every part landed in ``landing`` (on its peer's
        lane, one at a time: it may be copied to a device); kept for the next recv if
        ``call`` ended meanwhile. The landing goes to one recv: a recv that finds it taken
        by another (both asked for it at once) fetches the tensor again, as a recv of a
        tensor taken."""
        with self._lock:
            ours = state.landing is landing
            if ours and not call.future.done():
                state.landing = None  # (taken: kept again below if making the result fails)
        if call.future.done():  # (its out is its caller's again)
            if ours:
                self._keep(call.key.name, call.step_id, state, landing)
            return
        if not ours:
            self.follow(call, state)
            return
        try:
            result = landing.result(call)
        except Exception as exc:
            self._keep(call.key.name, call.step_id, state, landing)
            settle(call.future, as_error(exc, f"{call.what}: making the received tensor"))
            return
        self._deliver(call, state, result)

    def _parent_failed(self, call: RecvCall, state: _Following, error: BaseException | None) -> bool:
        """Fetch ``call``'s tensor from the sender if ``error`` says the relay's parent is
        gone; whether it did."""
        if isinstance(error, UnavailableError) and not state.direct and state.descriptor.parent != str(state.origin):
            self._parent_gone(call, state, error)  # (fetching still: from the sender now)
            return True
        return False

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
        if self._parent_failed(call, state, error):
            return
        self._fetch_ended(call)
        if error is None and state.direct and state.descriptor.served:
            error = self._late_result(call, state, fut.result())
            if error is None:
                return
        if error is None:
            result = fut.result()
            if call.future.cancelled() and state.out_copy is not None:  # (its caller may use out again)
                result, state.out_copy = state.out_copy, None
            try:
                self._pass_on_fetched(call, state, result)
            except Exception as exc:  # (no memory for its host copy): the next recv gets it
                if not call.future.cancelled():  # (a cancelled one's is kept: _call_ended)
                    try:  # (an out's copy may fail too: the recv ends all the same)
                        (self._keep if call.out is None else self._keep_out)(call.key.name, call.step_id, state,
                                                                             result)
                    finally:
                        settle(call.future, as_error(exc, f"{call.what}: passing the relayed tensor on"))
                return
            self._deliver(call, state, result, fetched=True)
            return
        settle(call.future, as_error(error, f"{call.what}: fetching the relayed tensor from "
                                            f"{state.origin if state.direct else state.descriptor.parent}"))

    def _pass_on_fetched(self, call: RecvCall, state: _Following, result: Any) -> None:
        """Pass ``result``, the tensor fetched for ``call``, on to the relay's children and
        keep it for its late receivers; confirm that this task has it."""
        try:
            if state.descriptor.children or state.descriptor.late:  # (in host memory once, for both)
                array = prepare(host_array(result, device_of(result))[0])
                self._replicate(call, state, array)
                if state.descriptor.children:
                    self._pass_on(call.step_id, state, array)
        finally:
            self._confirm(call.step_id, state, HAVE_IT)

    def _late_result(self, call: RecvCall, state: _Following, array: np.ndarray) -> BaseException | None:
        """Settle late receiver ``call`` with ``array``, fetched from the sender directly
        (its replica gone), or fail it if the sender says that nobody keeps the tensor; the
        error if making its result failed."""
        try:
            if is_relay(array) and RelayDescriptor.decode(array).gone:
                self._taken(call, state)
                settle(call.future, NotFoundError(f"{call.what}: the task that served it is gone, and "
                                                  f"{state.origin}'s tensor may have changed since"))
                return None
            if call.future.cancelled():  # (its cancel kept the tensor: _call_ended)
                self._confirm(call.step_id, state, HAVE_IT)
                return None
            result = result_of(array, call)
        except Exception as exc:
            return exc
        self._confirm(call.step_id, state, HAVE_IT)
        self._deliver(call, state, result, fetched=True)
        return None

    def _deliver(self, call: RecvCall, state: _Following, result: Any, fetched: bool = False) -> None:
        """Settle ``call`` with ``result``, its whole tensor (kept for the next recv of it
        if ``call`` was given up). ``fetched``: it came by the fetch whose cancel keeps it
        (:meth:`_call_ended`), not kept here again if ``call`` was cancelled."""
        with self._lock:
            if fetched and call.future.cancelled():
                return
            self._taken_locked(call, state)
        keep = self._keep if call.out is None else self._keep_out
        try:
            call.future.returnable(keep, call.key.name, call.step_id, state, result)
            if settle(call.future, None, result):
                return
        except ReferenceError:  # a parked recv's future, dropped
            pass
        if not (fetched and call.future.cancelled()):
            keep(call.key.name, call.step_id, state, result)

    def _replicate(self, call: RecvCall, state: _Following, array: np.ndarray) -> None:
        """Keep ``array``, ``call``'s tensor in host memory, for late receivers if its relay
        serves them (before confirming it: the sender may ask for it at once)."""
        if state.descriptor.late and not state.descriptor.served:  # (a late receiver's is its own)
            self.replicas.keep(Replica(state.descriptor, state.origin, call.key.name, call.step_id, array))

    def _pass_on(self, at: int, state: _Following, array: np.ndarray) -> None:
        """Offer ``array``, the tensor received at step ``at`` in host memory (or its parts
        not offered yet), to the relay's children at its own step."""
        descriptor = state.descriptor
        for part, (name, view) in enumerate(pieces(descriptor.tag, array, descriptor.parts)):
            self._offer_on(at, state, name, view, part)

    def _offer_on(self, at: int, state: _Following, name: str, array: Any, part: int = 0) -> None:
        """Offer ``array``, part ``part`` of the tensor received at step ``at`` (offered
        once), as ``name`` to each of the relay's children at its own step: kept until they
        take it, or PASS_ON_SECONDS after ``at`` is cleaned up."""
        descriptor = state.descriptor
        with self._lock:
            passed = state.passed
            if passed is None:
                passed = state.passed = _PassedOn(descriptor.step, at, descriptor.parts * len(descriptor.children),
                                                  cleaned=time.monotonic() if state.dropped else None)
                self._passed.append(passed)
            if part in passed.parts:
                return
            passed.parts.add(part)
        for child in descriptor.children:
            ticket = self._sends.open(f"a relayed tensor to {child} at step {at}")
            with self._lock:
                passed.completions.append(ticket.completion)
            try:
                self.offer(descriptor.step, parse_task(child), name, array, ticket=ticket)
            except TensorverbsError as exc:
                log.warning("passing a relayed tensor on to %s failed: %s", child, exc)
        self._sweep()

    def serve(self, origin: str, tag: str, receiver: str) -> bool:
        """Offer ``receiver`` a copy of the tensor of relay ``tag`` from ``origin`` that this
        task kept (ServeRelayed), at a step of its own (:func:`served_step`), kept until it
        takes it or PASS_ON_SECONDS pass (longer for a large one); False if this task does
        not keep it."""
        dst = parse_task(receiver)
        served = self.replicas.copy(tag, origin, self._rendezvous.allocate)
        if served is None:
            return False
        replica, array = served
        step = served_step(tag, str(dst))
        offers = pieces(tag, array, replica.descriptor.parts)
        # (kept PASS_ON_SECONDS, and a second more per SERVE_BYTES_PER_SECOND of it)
        expiry = time.monotonic() + array.nbytes / SERVE_BYTES_PER_SECOND
        passed = _PassedOn(step, replica.at, len(offers), cleaned=expiry)
        with self._lock:
            self._passed.append(passed)
        for name, view in offers:  # (a failure answers ServeRelayed: the sender asks another)
            ticket = self._served.open(f"a relayed tensor to late receiver {dst}")
            passed.completions.append(ticket.completion)
            self.offer(step, dst, name, view, ticket=ticket)
        self._sweep()
        return True

    def _confirm(self, step: int, state: _Following, what: int) -> None:
        """Tell the relay's sender that this task has its tensor (or needs it directly)."""
        name = ack_name(state.descriptor.tag, 1 if state.direct and what == HAVE_IT else 0)
        try:
            self.offer(step, state.origin, name, np.array([what], np.uint8))  # (flush waits not for it)
        except TensorverbsError as exc:
            log.warning("confirming a relayed tensor to %s failed: %s", state.origin, exc)

    def _keep(self, name: str, step: int, state: _Following, result: Any) -> None:
        """Keep ``result``, the tensor of ``state``, for the next recv of ``name`` at ``step``
        (its recv was given up, or gave it back): a tensor, or the :class:`Landing` of one
        whose parts all came (a copy if it was the recv's ``out``: the next recv fills its
        own). The tensor and the relay are registered at once, under the lock."""
        if isinstance(result, Landing):
            result.detach()
        with self._lock:
            if isinstance(result, Landing):
                state.landing = result
            else:
                state.kept = result
            if not state.dropped:
                self._following[(state.origin, name, step)] = state

    def _keep_out(self, name: str, step: int, state: _Following, result: Any) -> None:
        """:meth:`_keep` of ``result``, a recv's ``out``: a copy (its caller may use ``out``
        again once it gave the tensor back)."""
        self._keep(name, step, state, host_array(result, device_of(result))[0].copy())

    def _taken(self, call: RecvCall, state: _Following) -> None:
        with self._lock:
            self._taken_locked(call, state)

    def _taken_locked(self, call: RecvCall, state: _Following) -> None:
        if self._following.get((state.origin, call.key.name, call.step_id)) is state:
            del self._following[(state.origin, call.key.name, call.step_id)]

    def holds(self) -> bool:
        """Whether this task follows a relay, or holds what it passed on."""
        return bool(self._following or self._passed or self._fetching or self.replicas)

    def drop_step(self, step: int, error: TensorverbsError) -> None:
        """Forget the relays followed at ``step`` (cleaned up or aborted: ``error``): the
        recvs fetching a relayed tensor fail; what was passed on stays a while."""
        with self._lock:
            for at in [at for at in self._following if at[2] == step]:
                self._following.pop(at).dropped = True
            fetching = self._fetching.pop(step, {})
            for passed in self._passed:
                if passed.at == step and passed.cleaned is None:
                    passed.cleaned = time.monotonic()
        self.replicas.drop_step(step)
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
                late = passed.cleaned is not None and now - passed.cleaned >= PASS_ON_SECONDS
                (done if late or passed.taken() else kept).append(passed)
            self._passed = kept
        for passed in done:
            self._rendezvous.cleanup_step(passed.step)
