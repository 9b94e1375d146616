"""Relay broadcast: ``send(..., to=[...], relay=True)`` sends the tensor to the first
receiver only; each receiver passes it on to the next. Receivers recv as usual, each in a
process of its own; the sender's link carries each byte once (its bytes_sent), a receiver
that dies mid-relay is routed around and named in the handle, a recv that ended before
its tensor came gets it when asked again."""
from __future__ import annotations

import concurrent.futures
import gc
import os
import time

import numpy as np
import pytest

import tensorverbs as tv
from receivers import TRAINER, hold_lane, receiver_names, trainer_and_receivers, until
from tensorverbs.local_cluster import cluster_spec, pattern, same
from tensorverbs.cluster import parse_task
from tensorverbs.rendezvous.key import RendezvousKey
from tensorverbs.rendezvous.relay_plan import PREFIX, RelayDescriptor, part_count, part_name
from tensorverbs.tensor import dtype_enum
from variants import VARIANTS

WAIT = 60.0
RECEIVERS = receiver_names(4)
#: an inline tensor, one staged into the pool, one large enough to be registered
SIZES = [16, 64 << 10, 2 << 20]
#: tensors relayed in parts (2 and 5), of odd sizes
LARGE = [(8 << 20) + 4097, (20 << 20) + 3]


# -- in a receiver's process (TaskProcess.run) ------------------------------------------------
def recv_all(server: tv.Server, names: list[str], sizes: list[int], step: int, how: str = "recv",
             timeout: float = WAIT) -> list[bool]:
    """Receive each of ``names`` (``w<i>``) from the trainer (``how``); whether each holds
    its pattern (seeded ``step + i``)."""
    if how == "recv_many":
        got = server.recv_many([(name, TRAINER, step) for name in names], timeout=timeout)
    elif how == "recv_async":
        futures = [server.recv_async(name, TRAINER, step, timeout) for name in names]
        got = [fut.result() for fut in futures]
    elif how == "out":
        got = []
        for name, nbytes in zip(names, sizes):
            out = np.empty(nbytes, np.uint8)
            assert server.recv(name, TRAINER, step, timeout, out=out) is out
            got.append(out)
    else:
        got = [server.recv(name, TRAINER, step, timeout) for name in names]
    return [same(array, pattern(nbytes, step + int(name[1:])))
            for name, array, nbytes in zip(names, got, sizes)]


def recv_error(server: tv.Server, name: str, step: int, timeout: float, **kwargs) -> str:
    """The type of the error a recv of ``name`` from the trainer raises ("" if none)."""
    try:
        server.recv(name, TRAINER, step, timeout, **kwargs)
    except tv.TensorverbsError as exc:
        return type(exc).__name__
    return ""


_asked: list = []


def ask(server: tv.Server, names: list[str], step: int) -> None:
    """Start a recv of each of ``names`` and keep their futures, not looked at."""
    _asked[:] = [server.recv_async(name, TRAINER, step, WAIT) for name in names]


def answers(server: tv.Server, sizes: list[int], step: int) -> list[bool]:
    """Whether each future :func:`ask` kept holds its pattern."""
    got = [fut.result() for fut in _asked]
    return [same(array, pattern(nbytes, step + i)) for i, (array, nbytes) in enumerate(zip(got, sizes))]


def asked_errors(server: tv.Server) -> list[str]:
    """The type of the error each future :func:`ask` kept ends with ("" for none)."""
    return [type(fut.exception(WAIT)).__name__ if fut.exception(WAIT) else "" for fut in _asked]


def wait_following(server: tv.Server) -> None:
    """Return once a relay descriptor came for a recv of this task and is followed."""
    until(server._rt.relays.followed, "no relay followed")


def recv_then_exit(server: tv.Server, name: str, step: int) -> None:
    """Receive ``name`` (passing it on), then end the process at once, unstopped."""
    server.recv(name, TRAINER, step, WAIT)
    os._exit(0)


_outs: list = []


def ask_into_then_cancel(server: tv.Server, name: str, nbytes: int, step: int) -> bool:
    """Start a recv of ``name`` into an ``out`` (kept), and cancel it once its relay is followed."""
    _outs[:] = [np.zeros(nbytes, np.uint8)]
    fut = server.recv_async(name, TRAINER, step, WAIT, out=_outs[0])
    until(lambda: any(at[1:] == (name, step) for at in server._rt.relays._receiver._following),
           "no relay followed")
    return fut.cancel()


def recv_into_another(server: tv.Server, name: str, nbytes: int, step: int) -> tuple[bool, bool, bool]:
    """Receive ``name`` into a new ``out``: (whether it returned that out, whether it holds
    the pattern, whether the cancelled recv's out was left alone)."""
    out = np.zeros(nbytes, np.uint8)
    got = server.recv(name, TRAINER, step, WAIT, out=out)
    return got is out, same(out, pattern(nbytes, step)), not _outs[0].any()


def _fetching(server: tv.Server, fut, step: int) -> bool:
    """Whether the recv of ``fut`` fetches its relayed tensor (from the relay's parent)."""
    receiver = server._rt.relays._receiver
    with receiver._lock:
        return any(call.future is fut and fetch is not None for call, fetch in receiver._fetching.get(step, {}).items())


_lane: list = []


def fetch_then_hold_the_lane(server: tv.Server, name: str, nbytes: int, step: int) -> None:
    """Start a recv of ``name`` into an ``out`` and return once it fetches, with a recv of
    "hold" from the trainer started whose done-callback, once the trainer sends it, holds
    the trainer's lane (where tensorverbs' own callbacks of recvs from the trainer run too)
    until :func:`cancel_then_ask_again` frees it."""
    _outs[:] = [np.zeros(nbytes, np.uint8), np.zeros(nbytes, np.uint8)]
    first = server.recv_async(name, TRAINER, step, WAIT, out=_outs[0])
    until(lambda: _fetching(server, first, step), "the first recv did not fetch")
    held, free = hold_lane(server, TRAINER, step)
    _lane[:] = [first, held, free]


def cancel_then_ask_again(server: tv.Server, name: str, step: int) -> None:
    """Once the lane is held (:func:`fetch_then_hold_the_lane`), cancel the first recv and
    start a recv of ``name`` into the other ``out`` (its future kept); free the lane once
    that recv fetches."""
    first, held, free = _lane
    try:
        assert held.wait(WAIT), "the lane was not held"
        assert first.cancel(), f"the first recv ended before its cancel: {first.exception()!r}"
        _asked[:] = [server.recv_async(name, TRAINER, step, WAIT, out=_outs[1])]
        until(lambda: _fetching(server, _asked[0], step) or _asked[0].done(), "the second recv did not fetch")
    finally:
        free.set()


def send_to(server: tv.Server, name: str, dst: str, step: int) -> None:
    """Send a byte as ``name`` to ``dst`` (not waited for)."""
    server.send(name, np.zeros(1, np.uint8), to=dst, step_id=step)


def fetch_with_the_parents_lane_held(server: tv.Server, name: str, nbytes: int, step: int) -> None:
    """Start a recv of ``name`` into an ``out`` (kept, with its future) and return once it
    fetches, with a recv of "hold" from its relay's parent (the first receiver) started
    whose done-callback, once the parent sends it, holds the parent's lane (where the
    callbacks of the part fetches run) until :func:`cancel_once_every_part_came` frees it."""
    _outs[:] = [np.zeros(nbytes, np.uint8), np.zeros(nbytes, np.uint8)]
    first = server.recv_async(name, TRAINER, step, WAIT, out=_outs[0])
    until(lambda: _fetching(server, first, step), "the first recv did not fetch")
    held, free = hold_lane(server, RECEIVERS[0], step)
    _lane[:] = [first, held, free]


def cancel_once_every_part_came(server: tv.Server, name: str, nbytes: int, step: int,
                                recv: bool = True) -> tuple[bool, bool]:
    """Once every part of the first recv's tensor came (their callbacks held up on the
    parent's lane), cancel that recv, receive ``name`` into the other ``out`` (unless not
    ``recv``) and free the lane: whether that recv returned its ``out``, and whether it
    holds the pattern."""
    first, held, free = _lane
    receiver = server._rt.relays._receiver
    try:
        assert held.wait(WAIT), "the lane was not held"

        def parts_came() -> bool:
            with receiver._lock:
                fetch = next((f for call, f in receiver._fetching.get(step, {}).items() if call.future is first), None)
            return fetch is not None and len(fetch._futures) == part_count(nbytes) and \
                all(f.done() for f in fetch._futures.values())

        until(parts_came, "the parts did not come")
        assert first.cancel(), f"the first recv ended before its cancel: {first.exception()!r}"
        if not recv:
            return True, True
        got = server.recv(name, TRAINER, step, WAIT, out=_outs[1])
        return got is _outs[1], same(_outs[1], pattern(nbytes, step))
    finally:
        free.set()


def drop(server: tv.Server, name: str, step: int) -> None:
    """Receive ``name`` and drop the future unread (its tensor is kept for the next recv)."""
    first = server.recv_async(name, TRAINER, step, WAIT)
    concurrent.futures.wait([first], WAIT)
    del first  # (freed once the lane that settled it let go of it too)


def hold_the_lane_once_kept(server: tv.Server, name: str, step: int) -> None:
    """Return once ``name``'s relayed tensor is kept for the next recv (or the landing its
    parts came into), with a recv of "hold" from the trainer started whose
    done-callback, once the trainer sends it, holds the trainer's lane (where a kept
    landing is handed to a recv) until :func:`two_recvs_at_once` frees it."""
    receiver = server._rt.relays._receiver

    def kept() -> bool:
        with receiver._lock:
            state = receiver._following.get((parse_task(TRAINER), name, step))
        return state is not None and (state.kept is not None or
                                      state.landing is not None and state.landing.complete())

    until(kept, "the tensor was not kept")
    held, free = hold_lane(server, TRAINER, step)
    _lane[:] = [held, free]


def two_recvs_at_once(server: tv.Server, name: str, nbytes: int, step: int, timeout: float) -> list[str]:
    """Once the lane is held (:func:`hold_the_lane_once_kept`), start two recvs of
    ``name`` and free the lane: what each got ("pattern", or its error's type), sorted."""
    held, free = _lane
    try:
        assert held.wait(WAIT), "the lane was not held"
        futures = [server.recv_async(name, TRAINER, step, timeout) for _ in range(2)]
    finally:
        free.set()
    got = []
    for fut in futures:
        error = fut.exception(WAIT)
        got.append(type(error).__name__ if error is not None else
                   "pattern" if same(fut.result(), pattern(nbytes, step)) else "other bytes")
    return sorted(got)


def follow_a_recv(server: tv.Server, name: str, step: int) -> None:
    """Start a recv of ``name`` (kept, with its relay's descriptor) and return once its relay
    is followed."""
    receiver = server._rt.relays._receiver
    fut = server.recv_async(name, TRAINER, step, WAIT)

    def descriptor():
        with receiver._lock:
            return next((state.descriptor for at, state in receiver._following.items() if at[1:] == (name, step)),
                        None)

    until(lambda: descriptor() is not None, "no relay followed")
    _asked[:] = [fut, descriptor()]


def parts_kept_after_a_recv(server: tv.Server, nbytes: int, step: int) -> list[str]:
    """Once the recv :func:`follow_a_recv` started got the tensor (relayed in parts), ask
    the rendezvous again for each part it fetched from its parent: what each of those recvs
    got ("" for a tensor, else its error's type), once the futures of the fetches are freed."""
    receiver = server._rt.relays._receiver
    fut, descriptor = _asked
    assert same(fut.result(WAIT), pattern(nbytes, step))
    _asked.clear()
    del fut
    gc.collect()
    parent = parse_task(descriptor.parent)
    got = []
    for part in range(descriptor.parts):
        key = RendezvousKey(parent, 0, receiver._task, part_name(descriptor.tag, part))
        error = receiver._rendezvous.recv_async(key, descriptor.step, 0.2).exception(WAIT)
        got.append(type(error).__name__ if error is not None else "")
    return got


def second_out(server: tv.Server, nbytes: int, step: int) -> tuple[bool, bool, bool]:
    """Of the second recv :func:`cancel_then_ask_again` started: whether it returned
    its ``out``, whether that holds the pattern, whether the cancelled recv's ``out`` was
    left alone."""
    got = _asked[0].result(WAIT)
    return got is _outs[1], same(_outs[1], pattern(nbytes, step)), not _outs[0].any()


def drop_then_recv_into_another(server: tv.Server, name: str, nbytes: int, step: int) -> tuple[bool, bool]:
    """Start a recv of ``name`` into an ``out``, drop its future unread once it is done
    (its tensor goes to the next recv of it) and write into that ``out``, then receive
    ``name`` into another ``out``: whether that recv returned its own ``out``, and whether
    it holds the pattern."""
    first_out = np.zeros(nbytes, np.uint8)
    first = server.recv_async(name, TRAINER, step, WAIT, out=first_out)
    concurrent.futures.wait([first], WAIT)
    del first  # (freed once the lane that settled it let go of it too)
    until(server._rt.relays.followed, "the dropped recv's tensor was not kept")
    first_out[...] = 0  # (its caller's again)
    out = np.zeros(nbytes, np.uint8)
    got = server.recv(name, TRAINER, step, WAIT, out=out)
    return got is out, same(out, pattern(nbytes, step))


def recv_into_one_out(server: tv.Server, names: list[str], nbytes: int, step: int) -> list[bool]:
    """Receive each of ``names`` in turn into one ``out``; whether each held its pattern."""
    out = np.empty(nbytes, np.uint8)
    return [same(server.recv(name, TRAINER, step, WAIT, out=out), pattern(nbytes, step + int(name[1:])))
            for name in names]


def recv_seeded(server: tv.Server, name: str, nbytes: int, step: int, seed: int) -> bool:
    """Whether a recv of ``name`` at ``step`` holds the pattern seeded ``seed``."""
    return same(server.recv(name, TRAINER, step, WAIT), pattern(nbytes, seed))


def recv_then_zero(server: tv.Server, name: str, nbytes: int, step: int) -> bool:
    """Receive ``name`` into an ``out`` (kept), check it, then write zeros into it."""
    _outs[:] = [np.empty(nbytes, np.uint8)]
    held = same(server.recv(name, TRAINER, step, WAIT, out=_outs[0]), pattern(nbytes, step))
    _outs[0][...] = 0
    return held


def late_kept(server: tv.Server) -> tuple[int, int]:
    """(relays this task serves late receivers as their sender, tensors it keeps for them)."""
    relays = server._rt.relays
    return len(relays._sender._late), len(relays._receiver.replicas)


def exit_now(server: tv.Server) -> None:
    """End the process at once, unstopped."""
    os._exit(0)


# -- in the trainer's (this) process --------------------------------------------------------
@pytest.fixture(scope="module", params=list(VARIANTS))
def variant(request) -> str:
    """Every variant of the suite (over ibverbs in the soft-RoCE lane)."""
    return request.param


@pytest.fixture(scope="module")
def job(variant):
    """(the trainer, here; its four receivers, each in a process of its own)."""
    with trainer_and_receivers(variant, len(RECEIVERS)) as job:
        yield job


def _recv_everywhere(receivers, names, sizes, step, how="recv") -> list[list[bool]]:
    for receiver in receivers:  # all at once
        receiver.post("run", f"{__name__}:recv_all", names, sizes, step, how)
    return [receiver.result(WAIT * 2) for receiver in receivers]


@pytest.mark.parametrize("sizes, how, fanout", [
    (SIZES, "recv", True), (SIZES, "out", True), (SIZES, "recv_async", True), (SIZES, "recv_many", True),
    (SIZES, "recv", 2), (LARGE, "recv", True), (LARGE, "out", True), (LARGE, "recv_many", 2)])
def test_every_receiver_gets_every_tensor_and_the_sender_sends_each_once(job, step, sizes, fanout, how):
    """A large tensor goes in parts, each passed on as it lands: the relay's last receiver
    takes each part as a tensor of its own; a receiver passing on what landed in memory of
    its own registers nothing."""
    trainer, receivers = job
    names = [f"w{i}" for i in range(len(sizes))]
    before, received = trainer.stats()["bytes_sent"], receivers[-1].stats()["tensors_received"]
    registered = receivers[0].stats().get("source_registrations", 0)
    handles = [trainer.send(name, pattern(nbytes, step + i), to=RECEIVERS, step_id=step, relay=fanout)
               for i, (name, nbytes) in enumerate(zip(names, sizes))]
    assert _recv_everywhere(receivers, names, sizes, step, how) == [[True] * len(sizes)] * len(RECEIVERS)
    for handle in handles:
        handle.wait(timeout=WAIT)
    sent = trainer.stats()["bytes_sent"] - before
    children = 1 if fanout is True else fanout  # of the trainer, in the relay's tree
    # each byte once to each of its children, and a few hundred bytes of descriptors
    assert children * sum(sizes) <= sent < children * sum(sizes) + 4096, sent
    # each descriptor, and each tensor whole or each of its parts
    parts = sum(part_count(nbytes) for nbytes in sizes)
    assert receivers[-1].stats()["tensors_received"] - received == len(sizes) + parts
    if how != "out":  # landed in the protocol's registered memory: passed on as it is
        assert receivers[0].stats().get("source_registrations", 0) == registered
    for receiver in receivers:
        receiver.flush(timeout=WAIT)  # each child took what its parent passed on
    trainer.flush(timeout=WAIT)


# (not over ibverbs: the path is the same on every provider, and in the soft-RoCE lane's
# emulated guest this test alone took over a minute)
@pytest.mark.parametrize("variant", [v for v in VARIANTS if v != "ibverbs"])
def test_a_child_whose_parent_exited_gets_the_parts_it_passes_on_from_the_sender(variant, step):
    """The chain's second receiver ends before it asked: the third fetches the tensor from
    the sender whole and passes its parts on to the fourth."""
    chain = RECEIVERS[:4]
    with trainer_and_receivers(variant, len(chain)) as (trainer, receivers):
        handle = trainer.send("w0", pattern(LARGE[1], step), to=chain, step_id=step, relay=True)
        receivers[1].post("run", f"{__name__}:exit_now")
        with pytest.raises(tv.UnavailableError):
            receivers[1].result(WAIT)
        for i in (0, 2, 3):
            assert receivers[i].run(f"{__name__}:recv_all", ["w0"], LARGE[1:], step, "out") == [True]
        error = handle.exception(timeout=WAIT)
        assert isinstance(error, tv.UnavailableError), error
        assert chain[1] in str(error) and all(chain[i] not in str(error) for i in (0, 2, 3)), error


def test_a_recv_of_a_large_relayed_tensor_that_timed_out_gets_it_when_asked_again(job, step):
    """The second receiver's parent has not received yet: its recv into ``out`` times out;
    asked again (into another ``out``), it gets the tensor whole."""
    trainer, receivers = job
    handle = trainer.send("w0", pattern(LARGE[0], step), to=RECEIVERS[:2], step_id=step, relay=True)
    out = np.empty(LARGE[0], np.uint8)
    assert receivers[1].run(f"{__name__}:recv_error", "w0", step, 0.3, out=out) == "DeadlineExceededError"
    assert receivers[0].run(f"{__name__}:recv_all", ["w0"], LARGE[:1], step, "out") == [True]
    assert receivers[1].run(f"{__name__}:recv_all", ["w0"], LARGE[:1], step, "out") == [True]
    handle.wait(timeout=WAIT)


@pytest.mark.parametrize("nbytes", [SIZES[2], LARGE[0]])  # (whole, in parts)
def test_a_cancelled_relayed_recv_leaves_its_out_alone_and_the_next_recv_fills_its_own(job, step, nbytes):
    trainer, receivers = job
    handle = trainer.send("w0", pattern(nbytes, step), to=RECEIVERS[:2], step_id=step, relay=True)
    assert receivers[1].run(f"{__name__}:ask_into_then_cancel", "w0", nbytes, step)
    assert receivers[0].run(f"{__name__}:recv_all", ["w0"], [nbytes], step) == [True]
    assert receivers[1].run(f"{__name__}:recv_into_another", "w0", nbytes, step) == (True, True, True)
    handle.wait(timeout=WAIT)


@pytest.mark.parametrize("nbytes", [SIZES[2], LARGE[0]])  # (whole, in parts)
def test_a_cancelled_relayed_recv_stops_fetching_before_cancel_returns(job, step, nbytes):
    """The cancel of a relayed recv that fetches ends its fetch before it returns, though
    a callback holds the lane of the relay's sender: the next recv of the tensor, started
    at once, fetches into its own ``out``, and the cancelled one's is left alone."""
    trainer, receivers = job
    handle = trainer.send("w0", pattern(nbytes, step), to=RECEIVERS[:2], step_id=step, relay=True)
    receivers[1].run(f"{__name__}:fetch_then_hold_the_lane", "w0", nbytes, step)
    trainer.send("hold", np.zeros(1, np.uint8), to=RECEIVERS[1], step_id=step)
    receivers[1].run(f"{__name__}:cancel_then_ask_again", "w0", step)
    assert receivers[0].run(f"{__name__}:recv_all", ["w0"], [nbytes], step) == [True]
    assert receivers[1].run(f"{__name__}:second_out", nbytes, step) == (True, True, True)
    handle.wait(timeout=WAIT)


def test_a_relayed_recv_cancelled_once_its_parts_came_keeps_them_and_confirms(job, step):
    """Every part came, but their fetches' callbacks wait on the parent's lane: the cancel
    counts them landed, the next recv gets the tensor in its own ``out`` at once, and the
    sender hears that the receiver has it (its handle completes)."""
    trainer, receivers = job
    nbytes = LARGE[0]
    handle = trainer.send("w0", pattern(nbytes, step), to=RECEIVERS[:2], step_id=step, relay=True)
    receivers[1].run(f"{__name__}:fetch_with_the_parents_lane_held", "w0", nbytes, step)
    receivers[0].run(f"{__name__}:send_to", "hold", RECEIVERS[1], step)
    assert receivers[0].run(f"{__name__}:recv_all", ["w0"], [nbytes], step) == [True]
    assert receivers[1].run(f"{__name__}:cancel_once_every_part_came", "w0", nbytes, step) == (True, True)
    handle.wait(timeout=WAIT)


def test_a_receiver_keeps_no_part_of_a_relayed_tensor_it_received(job, step):
    """The parts a receiver fetched from its parent are taken, not handed back to the next
    recv of them when the fetches are freed (a copy of the whole tensor, kept until the
    relay's step is cleaned up)."""
    trainer, receivers = job
    nbytes = LARGE[0]
    handle = trainer.send("w0", pattern(nbytes, step), to=RECEIVERS[:2], step_id=step, relay=True)
    receivers[1].run(f"{__name__}:follow_a_recv", "w0", step)
    assert receivers[0].run(f"{__name__}:recv_all", ["w0"], [nbytes], step) == [True]
    assert receivers[1].run(f"{__name__}:parts_kept_after_a_recv", nbytes, step) == \
        ["DeadlineExceededError"] * part_count(nbytes)
    handle.wait(timeout=WAIT)


@pytest.mark.parametrize("how", ["dropped", "cancelled"])
def test_a_relayed_tensor_kept_in_parts_goes_to_one_of_two_recvs_asked_at_once(job, step, how):
    """A relayed tensor that came in parts, kept for the next recv (its recv's future was
    dropped unread, or the recv was cancelled once every part came); two recvs of it asked
    at once: one gets the tensor, the other waits for another (until its timeout), as two
    recvs of one tensor not relayed."""
    trainer, receivers = job
    nbytes = LARGE[0]
    handle = trainer.send("w0", pattern(nbytes, step), to=RECEIVERS[:2], step_id=step, relay=True)
    if how == "dropped":
        receivers[1].post("run", f"{__name__}:drop", "w0", step)
        assert receivers[0].run(f"{__name__}:recv_all", ["w0"], [nbytes], step) == [True]
        receivers[1].result(WAIT)
    else:
        receivers[1].run(f"{__name__}:fetch_with_the_parents_lane_held", "w0", nbytes, step)
        receivers[0].run(f"{__name__}:send_to", "hold", RECEIVERS[1], step)
        assert receivers[0].run(f"{__name__}:recv_all", ["w0"], [nbytes], step) == [True]
        receivers[1].run(f"{__name__}:cancel_once_every_part_came", "w0", nbytes, step, recv=False)
    receivers[1].run(f"{__name__}:hold_the_lane_once_kept", "w0", step)
    trainer.send("hold", np.zeros(1, np.uint8), to=RECEIVERS[1], step_id=step)
    got = receivers[1].run(f"{__name__}:two_recvs_at_once", "w0", nbytes, step, 2.0)
    assert got == ["DeadlineExceededError", "pattern"], got
    handle.wait(timeout=WAIT)

@pytest.mark.parametrize("nbytes", [SIZES[2], LARGE[0]])  # (whole, in parts)
def test_a_relayed_tensor_kept_for_a_dropped_recv_fills_the_next_recvs_out(job, step, nbytes):
    trainer, receivers = job
    handle = trainer.send("w0", pattern(nbytes, step), to=RECEIVERS[:2], step_id=step, relay=True)
    receivers[1].post("run", f"{__name__}:drop_then_recv_into_another", "w0", nbytes, step)
    assert receivers[0].run(f"{__name__}:recv_all", ["w0"], [nbytes], step) == [True]
    assert receivers[1].result(WAIT) == (True, True)
    handle.wait(timeout=WAIT)


@pytest.mark.parametrize("nbytes", [SIZES[1], LARGE[0]])  # (whole, in parts)
def test_a_relayed_recv_asked_again_into_an_out_of_another_dtype_is_refused(job, step, nbytes):
    trainer, receivers = job
    handle = trainer.send("w0", pattern(nbytes, step), to=RECEIVERS[:2], step_id=step, relay=True)
    assert receivers[1].run(f"{__name__}:recv_error", "w0", step, 0.3) == "DeadlineExceededError"
    wrong = np.empty(nbytes, np.int8)
    assert receivers[1].run(f"{__name__}:recv_error", "w0", step, WAIT, out=wrong) == "InvalidArgumentError"
    assert receivers[0].run(f"{__name__}:recv_all", ["w0"], [nbytes], step) == [True]
    assert receivers[1].run(f"{__name__}:recv_all", ["w0"], [nbytes], step, "out") == [True]
    handle.wait(timeout=WAIT)


def test_a_relay_descriptor_of_a_tensor_no_memory_holds_fails_the_recv(job, step):
    """A peer's descriptor of a tensor of 2**60 bytes in parts: the recv fails at once."""
    trainer, receivers = job
    forged = RelayDescriptor(f"{PREFIX}ff:1", dtype_enum(np.dtype(np.uint8)), (1 << 60,), TRAINER, (), 2)
    trainer._rt.relays._sender.offer(step, parse_task(RECEIVERS[0]), "w0", forged.encode(), "a forged relay")
    assert receivers[0].run(f"{__name__}:recv_error", "w0", step, 10.0) == "ResourceExhaustedError"
    trainer.cleanup_step(step)


def test_receivers_that_asked_before_and_do_not_look_still_pass_the_tensors_on(job, step):
    """Each receiver started its recvs before the sends and looks at them only once the
    sender's handles completed (a weight sync's usual order): the relay goes on as the
    tensors come, not when a future is looked at."""
    trainer, receivers = job
    names = [f"w{i}" for i in range(len(SIZES))]
    for receiver in receivers:
        receiver.run(f"{__name__}:ask", names, step)
    handles = [trainer.send(name, pattern(nbytes, step + i), to=RECEIVERS, step_id=step, relay=True)
               for i, (name, nbytes) in enumerate(zip(names, SIZES))]
    for handle in handles:
        handle.wait(timeout=WAIT)
    for receiver in receivers:
        assert receiver.run(f"{__name__}:answers", SIZES, step) == [True] * len(SIZES)


def test_a_receiver_that_dies_mid_relay_is_routed_around_and_named(variant, step):
    chain = RECEIVERS[:3]
    with trainer_and_receivers(variant, len(chain)) as (trainer, receivers):
        first = trainer.send("w0", pattern(64 << 10, step), to=chain, step_id=step, relay=True)
        assert receivers[0].run(f"{__name__}:recv_all", ["w0"], [64 << 10], step) == [True]
        receivers[1].post("run", f"{__name__}:recv_then_exit", "w0", step)
        with pytest.raises(tv.UnavailableError):  # (it ended without answering)
            receivers[1].result(WAIT)
        # the middle of the chain is gone: its child fetches what it missed from the trainer
        second = trainer.send("w1", pattern(64 << 10, step + 1), to=chain, step_id=step, relay=True)
        assert receivers[0].run(f"{__name__}:recv_all", ["w1"], [64 << 10], step) == [True]
        assert receivers[2].run(f"{__name__}:recv_all", ["w0", "w1"], [64 << 10] * 2, step) == [True, True]
        error = second.exception(timeout=WAIT)
        assert isinstance(error, tv.UnavailableError), error
        assert chain[1] in str(error) and chain[0] not in str(error) and chain[2] not in str(error), error
        error = first.exception(timeout=WAIT)  # its confirmation of w0 may have gone with it
        assert error is None or (chain[1] in str(error) and chain[2] not in str(error)), error


def test_a_child_whose_parent_cleaned_its_step_up_first_still_gets_the_tensor(job, step):
    """A receiver that cleans its step up once it has its weights (a training loop's
    habit) keeps what it passes on for its children."""
    trainer, receivers = job
    handle = trainer.send("w0", pattern(64 << 10, step), to=RECEIVERS[:2], step_id=step, relay=True)
    assert receivers[0].run(f"{__name__}:recv_all", ["w0"], [64 << 10], step) == [True]
    receivers[0].cleanup_step(step)
    assert receivers[1].run(f"{__name__}:recv_all", ["w0"], [64 << 10], step) == [True]
    handle.wait(timeout=WAIT)


def test_a_relayed_recv_waiting_for_its_parent_ends_when_its_step_is_aborted(job, step):
    trainer, receivers = job
    trainer.send("w0", pattern(4096, step), to=RECEIVERS[:2], step_id=step, relay=True)
    receivers[1].run(f"{__name__}:ask", ["w0"], step)  # its parent never asks
    receivers[1].run(f"{__name__}:wait_following")
    receivers[1].abort_step(step, "the step went wrong")
    assert receivers[1].run(f"{__name__}:asked_errors") == ["AbortedError"]
    trainer.cleanup_step(step)


def test_a_relayed_recv_that_timed_out_gets_its_tensor_when_asked_again(job, step):
    """The second receiver's parent has not received yet: its recv times out; asked again
    once the parent has the tensor, it gets it."""
    trainer, receivers = job
    handle = trainer.send("w0", pattern(64 << 10, step), to=RECEIVERS[:2], step_id=step, relay=True)
    assert receivers[1].run(f"{__name__}:recv_error", "w0", step, 0.3) == "DeadlineExceededError"
    assert receivers[0].run(f"{__name__}:recv_all", ["w0"], [64 << 10], step) == [True]
    assert receivers[1].run(f"{__name__}:recv_all", ["w0"], [64 << 10], step) == [True]
    handle.wait(timeout=WAIT)


def test_a_relayed_tensor_refused_by_out_is_kept_for_the_next_recv(job, step):
    trainer, receivers = job
    handle = trainer.send("w0", pattern(4096, step), to=RECEIVERS[:2], step_id=step, relay=True)
    wrong = np.empty(1024, np.float64)
    assert receivers[0].run(f"{__name__}:recv_error", "w0", step, WAIT, out=wrong) == "InvalidArgumentError"
    assert receivers[0].run(f"{__name__}:recv_all", ["w0"], [4096], step, "out") == [True]
    assert receivers[1].run(f"{__name__}:recv_all", ["w0"], [4096], step, "out") == [True]
    handle.wait(timeout=WAIT)


def test_a_relay_at_a_cleaned_up_step_fails_naming_the_receivers_that_did_not_confirm(job, step):
    trainer, receivers = job
    handle = trainer.send("w0", pattern(4096, step), to=RECEIVERS[:3], step_id=step, relay=True)
    assert receivers[0].run(f"{__name__}:recv_all", ["w0"], [4096], step) == [True]
    # the trainer learns that the first has it as its transport tells (a soft provider's
    # acknowledgement may come after the receiver's recv returned)
    assert handle.completions[0].wait(WAIT)
    trainer.cleanup_step(step)  # the others never asked
    error = handle.exception(timeout=WAIT)
    assert isinstance(error, tv.AbortedError), error
    assert RECEIVERS[1] in str(error) and RECEIVERS[2] in str(error) and RECEIVERS[0] not in str(error), error
    receivers[0].cleanup_step(step)  # (what it passed on, nobody takes)


def _sent(tasks) -> list[int]:
    return [task.stats()["bytes_sent"] for task in tasks]


@pytest.mark.parametrize("nbytes", [SIZES[2], LARGE[0]])  # (whole, in parts)
def test_late_receivers_get_the_tensor_from_the_receivers_that_have_it_the_senders_link_idle(job, step, nbytes):
    """Two tasks not among the relay's receivers recv it after the broadcast: each is served
    by a receiver (the least used first), the trainer sending a descriptor only."""
    trainer, receivers = job
    handle = trainer.send("w0", pattern(nbytes, step), to=RECEIVERS[:2], step_id=step, relay=True, late=True)
    assert _recv_everywhere(receivers[:2], ["w0"], [nbytes], step) == [[True]] * 2
    handle.wait(timeout=WAIT)
    before = _sent([trainer, *receivers[:2]])
    for late in receivers[2:]:  # one after the other
        assert late.run(f"{__name__}:recv_all", ["w0"], [nbytes], step, "out") == [True]
    grew = [after - then for after, then in zip(_sent([trainer, *receivers[:2]]), before)]
    assert grew[0] < 2 * 4096, grew  # descriptors
    assert grew[1] >= nbytes and grew[2] >= nbytes, grew  # one late receiver each
    for task in receivers:
        task.cleanup_step(step)
    trainer.cleanup_step(step)


def test_a_late_receiver_that_asked_before_anyone_had_the_tensor_gets_it_from_the_sender(job, step):
    trainer, receivers = job
    nbytes = SIZES[2]
    receivers[3].post("run", f"{__name__}:recv_all", ["w0"], [nbytes], step)
    deadline = time.monotonic() + WAIT
    while trainer.pending()[1] < 1:  # a condition, polled
        assert time.monotonic() < deadline, "the late receiver's recv never reached the trainer"
        time.sleep(0.005)
    before = trainer.stats()["bytes_sent"]
    handle = trainer.send("w0", pattern(nbytes, step), to=RECEIVERS[:1], step_id=step, relay=True, late=True)
    assert receivers[3].result(WAIT * 2) == [True]
    assert receivers[0].run(f"{__name__}:recv_all", ["w0"], [nbytes], step) == [True]
    handle.wait(timeout=WAIT)
    assert trainer.stats()["bytes_sent"] - before >= 2 * nbytes  # to each, nobody had it
    for task in (receivers[0], receivers[3], trainer):
        task.cleanup_step(step)


def test_a_late_receiver_is_served_by_the_sender_once_the_receivers_cleaned_the_step_up(job, step):
    trainer, receivers = job
    nbytes = LARGE[0]
    handle = trainer.send("w0", pattern(nbytes, step), to=RECEIVERS[:2], step_id=step, relay=True, late=True)
    assert _recv_everywhere(receivers[:2], ["w0"], [nbytes], step) == [[True]] * 2
    handle.wait(timeout=WAIT)
    for receiver in receivers[:2]:
        receiver.cleanup_step(step)  # they keep it no more
    before = trainer.stats()["bytes_sent"]
    assert receivers[3].run(f"{__name__}:recv_all", ["w0"], [nbytes], step) == [True]
    assert trainer.stats()["bytes_sent"] - before >= nbytes
    trainer.cleanup_step(step)
    receivers[3].cleanup_step(step)


def test_a_receiver_that_lands_another_tensor_in_the_same_out_does_not_serve_the_first(job, step):
    """The receiver's out holds another tensor's bytes now: the late receiver of the first
    gets it from the trainer, whole and right."""
    trainer, receivers = job
    nbytes, names = SIZES[2], ["w0", "w1"]
    handles = [trainer.send(name, pattern(nbytes, step + i), to=RECEIVERS[:1], step_id=step, relay=True, late=True)
               for i, name in enumerate(names)]
    assert receivers[0].run(f"{__name__}:recv_into_one_out", names, nbytes, step) == [True, True]
    for handle in handles:
        handle.wait(timeout=WAIT)
    before = trainer.stats()["bytes_sent"]
    assert receivers[3].run(f"{__name__}:recv_all", ["w0"], [nbytes], step) == [True]
    assert trainer.stats()["bytes_sent"] - before >= nbytes
    for task in (trainer, receivers[0], receivers[3]):
        task.cleanup_step(step)


@pytest.mark.parametrize("variant", [v for v in VARIANTS if v != "ibverbs"])  # (5 s: a parent gone)
def test_a_receiver_whose_parent_is_gone_gets_a_tensor_the_sender_relayed_again(variant, step):
    """The sender relays one unchanged tensor again (a later step, late receivers served):
    a receiver of the first relay whose parent is gone still gets it from the sender."""
    with trainer_and_receivers(variant, 2) as (trainer, receivers):
        array = pattern(64 << 10, step)
        handles = [trainer.send("w0", array, to=RECEIVERS[:2], step_id=s, relay=True, late=True)
                   for s in (step, step + 1_000_000)]
        receivers[0].post("run", f"{__name__}:exit_now")
        with pytest.raises(tv.UnavailableError):
            receivers[0].result(WAIT)
        assert receivers[1].run(f"{__name__}:recv_all", ["w0"], [64 << 10], step) == [True]
        assert handles[0].completions[1].wait(WAIT) and handles[0].completions[1].outcome()[0] == 0


def test_a_task_keeps_the_latest_late_relay_of_each_name(job, step):
    trainer, receivers = job
    for i in range(3):  # one name, one step: each recv takes the next, the sender serves the latest
        trainer.send("w0", pattern(4096, step + i), to=RECEIVERS[:1], step_id=step, relay=True, late=True)
        trainer.send("w1", pattern(4096, step + i), to=RECEIVERS[:1], step_id=step, relay=True, late=True)
        for name in ("w0", "w1"):
            assert receivers[0].run(f"{__name__}:recv_seeded", name, 4096, step, step + i)
    assert late_kept(trainer)[0] == 2
    assert receivers[0].run(f"{__name__}:late_kept")[1] == 2
    for task in (trainer, receivers[0]):
        task.cleanup_step(step)
    assert late_kept(trainer) == (0, 0) and receivers[0].run(f"{__name__}:late_kept") == (0, 0)


def test_a_late_receiver_of_a_tensor_nobody_keeps_any_more_is_told_so(job, step):
    """The sender relayed the same memory again under another name (it may have changed),
    and the receiver cleaned the step up: the late receiver's recv fails, naming the sender."""
    trainer, receivers = job
    array = pattern(4096, step)
    first = trainer.send("w0", array, to=RECEIVERS[:1], step_id=step, relay=True, late=True)
    trainer.send("w1", array, to=RECEIVERS[:1], step_id=step, relay=True, late=True)
    assert receivers[0].run(f"{__name__}:recv_all", ["w0"], [4096], step) == [True]
    first.wait(timeout=WAIT)  # (until then the trainer's tensor is as sent: it serves it)
    receivers[0].cleanup_step(step)
    assert receivers[3].run(f"{__name__}:recv_error", "w0", step, 20) == "NotFoundError"
    for task in (trainer, receivers[3]):
        task.cleanup_step(step)


def test_a_late_receiver_that_asks_before_the_receivers_of_memory_sent_twice_gets_it_from_the_sender(job, step):
    """One buffer relayed under two names (to two receivers): a late receiver that asks for
    the first before its receiver confirmed is served by the sender (its receivers' sends
    are not settled: it is unchanged)."""
    trainer, receivers = job
    array = pattern(4096, step)
    for name, receiver in (("w0", RECEIVERS[0]), ("w1", RECEIVERS[1])):
        trainer.send(name, array, to=[receiver], step_id=step, relay=True, late=True)
    assert receivers[3].run(f"{__name__}:recv_all", ["w0"], [4096], step) == [True]
    assert receivers[0].run(f"{__name__}:recv_all", ["w0"], [4096], step) == [True]
    assert receivers[1].run(f"{__name__}:recv_seeded", "w1", 4096, step, step)
    for task in (trainer, *receivers):
        task.cleanup_step(step)


def test_a_late_receiver_serves_no_other_what_it_got_is_its_own(job, step):
    """A late receiver writes into what it got; the next is served by a receiver, right."""
    trainer, receivers = job
    nbytes = SIZES[2]
    handle = trainer.send("w0", pattern(nbytes, step), to=RECEIVERS[:1], step_id=step, relay=True, late=True)
    assert receivers[0].run(f"{__name__}:recv_all", ["w0"], [nbytes], step) == [True]
    handle.wait(timeout=WAIT)
    assert receivers[2].run(f"{__name__}:recv_then_zero", "w0", nbytes, step)
    assert receivers[3].run(f"{__name__}:recv_all", ["w0"], [nbytes], step) == [True]
    for task in (trainer, *receivers):
        task.cleanup_step(step)


def test_a_relay_of_strings_is_sent_as_a_broadcast_and_late_is_refused(job, step):
    trainer, receivers = job
    strings = np.array([b"x" * 100 + str(i).encode() for i in range(1000)], object)
    handle = trainer.send("s", strings, to=RECEIVERS[:2], step_id=step, relay=True)
    for receiver in receivers[:2]:
        assert list(receiver.recv("s", TRAINER, step, WAIT)) == list(strings)
    handle.wait(timeout=WAIT)
    with pytest.raises(tv.InvalidArgumentError, match="not strings"):
        trainer.send("t", strings, to=RECEIVERS[:2], step_id=step, relay=True, late=True)
    trainer.cleanup_step(step)


def test_a_late_receivers_next_recv_of_the_name_gets_the_next_relay_of_it(job, step):
    """One name, one step, relayed round after round (as with the default step): a late
    receiver's recv that waits for the next round is not served the last one again."""
    trainer, receivers = job
    for seed in (step, step + 1):
        if seed > step:  # its recv waits before the round is sent
            receivers[3].post("run", f"{__name__}:recv_seeded", "w0", 4096, step, seed)
            deadline = time.monotonic() + WAIT
            while trainer.pending()[1] < 1:  # a condition, polled
                assert time.monotonic() < deadline, "the late receiver's recv never reached the trainer"
                time.sleep(0.005)
        trainer.send("w0", pattern(4096, seed), to=RECEIVERS[:1], step_id=step, relay=True, late=True)
        assert receivers[0].run(f"{__name__}:recv_seeded", "w0", 4096, step, seed)
        if seed == step:
            assert receivers[3].run(f"{__name__}:recv_seeded", "w0", 4096, step, seed)
    assert receivers[3].result(WAIT)
    for task in (trainer, *receivers):
        task.cleanup_step(step)


def test_late_needs_a_relay(step):
    trainer = tv.Server(cluster_spec({"trainer": 1, "worker": len(RECEIVERS)}), "trainer", 0)
    with pytest.raises(tv.InvalidArgumentError, match="relay=True, late=True"):
        trainer.send("w", np.arange(4), to=RECEIVERS, step_id=step, late=True)
    with pytest.raises(tv.InvalidArgumentError, match="True or False"):
        trainer.send("w", np.arange(4), to=RECEIVERS, step_id=step, relay=True, late=1)
    trainer.stop()


@pytest.mark.parametrize("relay, what", [(0, "expected 1 or more"), (17, "at most 16"), ("yes", "integer")])
def test_a_bad_relay_is_refused(step, relay, what):
    trainer = tv.Server(cluster_spec({"trainer": 1, "worker": len(RECEIVERS)}), "trainer", 0)
    with pytest.raises(tv.InvalidArgumentError, match=what):
        trainer.send("w", np.arange(4), to=RECEIVERS, step_id=step, relay=relay)
    with pytest.raises(tv.InvalidArgumentError, match="the sending task"):
        trainer.send("w", np.arange(4), to=[RECEIVERS[0], TRAINER], step_id=step, relay=True)
    assert trainer.pending()[0] == 0  # nothing was offered
    trainer.stop()
