"""A recv of a relayed tensor interrupted (Ctrl-C) loses no tensor and delivers none twice:
either the interrupted recv returned it, or a retry gets it; and nothing of it is left for
another recv. Interrupted at any point of the relay's code it runs, once the tensor was
kept for it (the first recv's future was dropped unread); and by a real SIGINT as it waits,
once its fetch from the relay's parent got the tensor."""
from __future__ import annotations

import concurrent.futures
import os
import signal
import threading
import time

import numpy as np
import pytest

import tensorverbs as tv
from interrupt_points import interrupt_at
from interrupting import _interrupted
from receivers import TRAINER, hold_lane, receiver_names, trainer_and_receivers, until
from tensorverbs.cluster import parse_task
from tensorverbs.rendezvous.key import RendezvousKey
from tensorverbs.rendezvous.relay_parts import PartFetch
from tensorverbs.rendezvous.relay_plan import part_name
from tensorverbs.local_cluster import pattern, same

WAIT = 60.0
RECEIVERS = receiver_names(2)
RECEIVER = RECEIVERS[0]
#: the relay's code a recv that follows a relay runs on the caller's thread
RELAY_CODE = ("tensorverbs/rendezvous/relay_receiver.py", "tensorverbs/rendezvous/relay_parts.py",
              "tensorverbs/rendezvous/relay.py")
#: a whole tensor, and one relayed in parts
SIZES = [64 << 10, (8 << 20) + 4097]


# -- in the receiver's process (TaskProcess.run) ----------------------------------------------
def _kept(server: tv.Server, name: str, step: int) -> bool:
    receiver = server._rt.relays._receiver
    with receiver._lock:
        state = receiver._following.get((parse_task(TRAINER), name, step))
    return state is not None and state.kept is not None


def interrupted_recv_of_kept(server: tv.Server, name: str, nbytes: int, step: int, k: int) -> tuple[str | None, str]:
    """Receive ``name`` and drop the future unread (the tensor is kept for the next recv),
    then receive it again with a KeyboardInterrupt raised at the ``k``-th point of the
    relay's code: (where it was raised, or None past the last point; what became of the
    tensor: "returned" by the interrupted recv, "retried" by the next, "twice" or "lost")."""
    first = server.recv_async(name, TRAINER, step, WAIT)
    concurrent.futures.wait([first], WAIT)
    del first  # (freed once the lane that settled it let go of it too)
    until(lambda: _kept(server, name, step), "the dropped recv's tensor was not kept")
    got: list = []
    where = interrupt_at(k, lambda: got.append(server.recv(name, TRAINER, step, WAIT)), RELAY_CODE)
    try:  # (a tensor kept is handed over at once; one given back too)
        again = server.recv(name, TRAINER, step, 0.5 if got else 5.0)
    except tv.DeadlineExceededError:
        again = None
    if got:
        assert same(got[0], pattern(nbytes, step)), f"wrong bytes after an interrupt at the {where}"
        return where, "twice" if again is not None else "returned"
    if again is None:
        return where, "lost"
    assert same(again, pattern(nbytes, step)), f"wrong bytes after an interrupt at the {where}"
    return where, "retried"


_lane: list = []


def hold_the_parents_lane(server: tv.Server, step: int) -> None:
    """Start a recv of "hold" from the relay's parent (the first receiver) whose
    done-callback, once the parent sends it, holds the parent's lane (where the callbacks of
    the fetches from it run) until :func:`interrupted_fetching_recv` frees it."""
    _lane[:] = hold_lane(server, RECEIVERS[0], step)


def _fetching(server: tv.Server, step: int) -> bool:
    """Whether a recv at ``step`` fetches its tensor from the relay's parent."""
    receiver = server._rt.relays._receiver
    with receiver._lock:
        return any(fetch is not None for fetch in receiver._fetching.get(step, {}).values())


def _got(fetch: concurrent.futures.Future | PartFetch, descriptor) -> bool:
    """Whether ``fetch``, from the parent of ``descriptor``'s tensor, got every byte."""
    if isinstance(fetch, PartFetch):
        futures = list(fetch._futures.values())
        return len(futures) >= descriptor.parts and all(f.done() for f in futures)
    return fetch.done()


def _fetched(server: tv.Server, step: int) -> tuple[RendezvousKey, int] | None:
    """The key and step of the (last) fetch from the parent of the recv fetching at
    ``step``, once it got every byte (None before)."""
    receiver = server._rt.relays._receiver
    with receiver._lock:
        fetches = list(receiver._fetching.get(step, {}).values())
        states = [state for at, state in receiver._following.items() if at[2] == step]
    if len(fetches) != 1 or fetches[0] is None or len(states) != 1:
        return None
    fetch, descriptor = fetches[0], states[0].descriptor
    if not _got(fetch, descriptor):
        return None
    name = part_name(descriptor.tag, descriptor.parts - 1) if isinstance(fetch, PartFetch) else descriptor.data
    return RendezvousKey(parse_task(descriptor.parent), 0, receiver._task, name), descriptor.step


def _fetches(server: tv.Server, step: int) -> tuple[int, int]:
    """(the recvs at ``step`` fetching from the relay's parent, those of them whose fetch
    got every byte)."""
    receiver = server._rt.relays._receiver
    with receiver._lock:
        fetches = {call.key.name: f for call, f in receiver._fetching.get(step, {}).items() if f is not None}
        descriptors = {at[1]: state.descriptor for at, state in receiver._following.items() if at[2] == step}
    return len(fetches), sum(name in descriptors and _got(f, descriptors[name]) for name, f in fetches.items())


def interrupted_fetching_recv(server: tv.Server, name: str, nbytes: int, step: int) -> tuple[str | None, str, str]:
    """Receive ``name`` (relayed) on the main thread, interrupted by a SIGINT once its
    fetch from the parent got the tensor (whose callbacks wait on the parent's lane, held:
    :func:`hold_the_parents_lane`); then free the lane and receive it again: (the
    interruption's exception, what became of the tensor as :func:`interrupted_recv_of_kept`
    says, and what a recv of the last fetch's key then gets: "" or its error's type)."""
    held, free = _lane
    fetched: list[tuple[RendezvousKey, int]] = []

    def interrupt() -> None:
        deadline = time.monotonic() + WAIT
        while not _fetching(server, step):  # a condition, polled
            if time.monotonic() > deadline:
                return
            time.sleep(0.001)
        # (the parent passes the tensor on only now: had it done so before, the fetch would
        # have ended as it started, its callbacks run here rather than on the held lane)
        server.send("fetching", np.zeros(1, np.uint8), to=TRAINER, step_id=step)
        while (fetch := _fetched(server, step)) is None:
            if time.monotonic() > deadline:
                return
            time.sleep(0.001)
        fetched.append(fetch)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    got: list = []
    try:
        assert held.wait(WAIT), "the parent's lane was not held"
        interrupted = _interrupted(lambda: got.append(server.recv(name, TRAINER, step, WAIT)), False)
    finally:
        free.set()
    assert fetched, "the fetch did not get the tensor"
    try:
        again = server.recv(name, TRAINER, step, 0.5 if got else 5.0)
    except tv.DeadlineExceededError:
        again = None
    outcome = ("twice" if again is not None else "returned") if got else "lost" if again is None else "retried"
    assert same(got[0] if got else again, pattern(nbytes, step)) or outcome == "lost", "wrong bytes"
    error = server._rt.relays._receiver._rendezvous.recv_async(*fetched[0], 0.5).exception(WAIT)
    return interrupted and interrupted[0], outcome, type(error).__name__ if error is not None else ""


def interrupted_fetching_recv_many(server: tv.Server, names: list[str], nbytes: int, step: int
                                   ) -> tuple[str | None, list[str]]:
    """``recv_many`` of ``names`` (``w<i>``, relayed) on the main thread, interrupted by a
    SIGINT once every entry's fetch from the parent got its tensor (whose callbacks wait on
    the parent's lane, held: :func:`hold_the_parents_lane`); then free the lane and receive
    each again: (the interruption's exception, what became of each tensor as
    :func:`interrupted_recv_of_kept` says)."""
    held, free = _lane

    def interrupt() -> None:
        deadline = time.monotonic() + WAIT
        while _fetches(server, step)[0] < len(names):  # a condition, polled
            if time.monotonic() > deadline:
                return
            time.sleep(0.001)
        server.send("fetching", np.zeros(1, np.uint8), to=TRAINER, step_id=step)  # (see above)
        while _fetches(server, step)[1] < len(names):
            if time.monotonic() > deadline:
                return
            time.sleep(0.001)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    got: list = []
    try:
        assert held.wait(WAIT), "the parent's lane was not held"
        interrupted = _interrupted(
            lambda: got.append(server.recv_many([(name, TRAINER, step) for name in names], timeout=WAIT)), False)
    finally:
        free.set()
    assert not got, "recv_many returned before it was interrupted"
    outcomes = []
    for i, name in enumerate(names):
        try:
            again = server.recv(name, TRAINER, step, 5.0)
        except tv.DeadlineExceededError:
            outcomes.append("lost")
            continue
        assert same(again, pattern(nbytes, step + i)), f"wrong bytes of {name}"
        try:
            server.recv(name, TRAINER, step, 0.5)
            outcomes.append("twice")
        except tv.DeadlineExceededError:
            outcomes.append("retried")
    return interrupted and interrupted[0], outcomes


# -- in the trainer's (this) process ----------------------------------------------------------
@pytest.fixture(scope="module", params=["grpc", "verbs"])
def job(request):
    """(the trainer, here; its receivers, each in a process of its own): on grpc a relay's
    descriptor is followed on a lane, on grpc+verbs a blocking recv follows it itself."""
    with trainer_and_receivers(request.param, len(RECEIVERS)) as job:
        yield job


@pytest.mark.parametrize("nbytes", SIZES)
def test_a_recv_of_a_kept_relayed_tensor_interrupted_at_any_point_loses_it_not(job, nbytes):
    trainer, (receiver, _) = job
    step, points = 3000 if nbytes == SIZES[0] else 4000, 0
    while True:
        step += 1
        handle = trainer.send("w", pattern(nbytes, step), to=[RECEIVER], step_id=step, relay=True)
        where, outcome = receiver.run(f"{__name__}:interrupted_recv_of_kept", "w", nbytes, step, points + 1)
        assert outcome in ("returned", "retried"), f"the tensor was {outcome} after an interrupt at the {where}"
        handle.wait(timeout=WAIT)
        if where is None:
            break
        points += 1
    assert points > 3, points  # (the relay's code was traced)


@pytest.mark.parametrize("nbytes", SIZES)
def test_a_relayed_recv_interrupted_once_its_fetch_got_the_tensor_keeps_it_once(job, nbytes):
    """Ctrl-C in the wait of a relayed recv whose fetch from the relay's parent got the
    tensor: the tensor goes to the next recv, and the fetch (the library's own recv) is not
    given back as well (a second copy, kept for nobody)."""
    trainer, receivers = job
    step = 5000 if nbytes == SIZES[0] else 6000
    receivers[1].run(f"{__name__}:hold_the_parents_lane", step)
    handle = trainer.send("w0", pattern(nbytes, step), to=RECEIVERS, step_id=step, relay=True)
    receivers[1].post("run", f"{__name__}:interrupted_fetching_recv", "w0", nbytes, step)
    receivers[0].run("test_relay:send_to", "hold", RECEIVERS[1], step)
    trainer.recv("fetching", RECEIVERS[1], step, timeout=WAIT)  # (its recv fetches: the parent may have it now)
    assert receivers[0].run("test_relay:recv_all", ["w0"], [nbytes], step) == [True]
    assert receivers[1].result(WAIT) == ("KeyboardInterrupt", "retried", "DeadlineExceededError")
    handle.wait(timeout=WAIT)


@pytest.mark.parametrize("nbytes", SIZES)
def test_a_recv_many_of_relayed_tensors_interrupted_once_their_fetches_got_them_keeps_each_once(job, nbytes):
    """Ctrl-C in the wait of a ``recv_many`` whose entries follow relays, once every fetch
    from the relay's parent got its tensor: each tensor goes to the next recv of it, once
    (none is lost with a future read before the interruption, and no relay descriptor is
    handed back to the protocol as well, for a recv that would follow it again)."""
    trainer, receivers = job
    step, names = 7000 if nbytes == SIZES[0] else 8000, ["w0", "w1"]
    receivers[1].run(f"{__name__}:hold_the_parents_lane", step)
    handles = [trainer.send(name, pattern(nbytes, step + i), to=RECEIVERS, step_id=step, relay=True)
               for i, name in enumerate(names)]
    receivers[1].post("run", f"{__name__}:interrupted_fetching_recv_many", names, nbytes, step)
    receivers[0].run("test_relay:send_to", "hold", RECEIVERS[1], step)
    trainer.recv("fetching", RECEIVERS[1], step, timeout=WAIT)
    assert receivers[0].run("test_relay:recv_all", names, [nbytes] * len(names), step) == [True, True]
    assert receivers[1].result(WAIT) == ("KeyboardInterrupt", ["retried", "retried"])
    for handle in handles:
        handle.wait(timeout=WAIT)
