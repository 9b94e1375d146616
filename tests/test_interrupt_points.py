"""A recv interrupted (Ctrl-C) at any point of its start, on the grpc protocol, loses no
tensor: a retry in the same process gets the tensor that the interrupted recv had asked
for. Before, a recv whose request had gone out when the signal's exception was raised, but
that was not yet registered to be withdrawn, stayed in flight: the tensor went to its
future, which nobody held. (On grpc+verbs the native core starts the recv in one call.)"""
from __future__ import annotations

import time

import pytest

from tensorverbs.devices import STAND_IN
from tensorverbs.errors import DeadlineExceededError
from tensorverbs.local_cluster import pattern, same

from interrupt_points import interrupt_at
from variants import Pair, pair_of, start_pair

PS, WORKER = Pair.PS, Pair.WORKER
NBYTES = 4096
#: where a recv starts: the rendezvous, the batch
START_CODE = ("tensorverbs/rendezvous/remote.py", "tensorverbs/batches.py")


@pytest.fixture(scope="module")
def pair():
    yield from pair_of("grpc")


def _quietly(fn) -> None:
    try:
        fn()
    except DeadlineExceededError:  # (not interrupted: the recv ended at its timeout)
        pass


@pytest.mark.parametrize("call", ["recv", "recv_many"])
def test_a_recv_interrupted_at_any_point_of_its_start_keeps_its_tensor(pair, call):
    worker, step, points = pair.worker, 1000 if call == "recv" else 2000, 0
    while True:
        step += 1
        names = _names(call)
        start = _recv(worker, call, names, step, 0.2)
        where = interrupt_at(points + 1, lambda: _quietly(start), START_CODE)
        if where is None:
            break
        points += 1
        _send(pair, names, step)
        _each_kept(worker, names, step, where)
    assert points > 3  # the start was traced


def _names(call: str) -> list[str]:
    return ["a"] if call == "recv" else ["a", "b"]


def _recv(worker, call: str, names: list[str], step: int, timeout: float):
    """The recv (``call``) of ``names`` at ``step``, to be called."""
    if call == "recv":
        return lambda: worker.recv(names[0], PS, step, timeout=timeout)
    return lambda: worker.recv_many([(n, PS, step) for n in names], timeout=timeout)


def _send(pair, names: list[str], step: int) -> None:
    for i, name in enumerate(names):
        pair.ps.call("send_pattern", name, WORKER, step, NBYTES, step + i)


def _each_kept(worker, names: list[str], step: int, where: str) -> None:
    """A retry of each recv of ``names`` gets its tensor, after an interrupt ``where``."""
    for i, name in enumerate(names):
        try:
            got = worker.recv(name, PS, step, timeout=30)
        except DeadlineExceededError:
            pytest.fail(f"{name!r} was lost after an interrupt at the {where}")
        assert same(got, pattern(NBYTES, step + i)), f"{name!r} wrong after an interrupt at the {where}"


#: what a recv on grpc+verbs runs once the native core has its answer, up to the public call
RESULT_CODE = ("tensorverbs/verbs/rendezvous.py", "tensorverbs/rendezvous/delivery.py",
               "tensorverbs/recv_calls.py", "tensorverbs/batch_calls.py", "tensorverbs/batches.py",
               "tensorverbs/errors.py", "tensorverbs/tensor.py", "tensorverbs/stats.py")
#: the public call's own return (its wrapper's), where CPython runs no signal handler: a
#: Python function's return goes on in its caller without one
PUBLIC_RETURN = "return of call at errors.py"


@pytest.fixture(scope="module")
def verbs_pair():
    yield from pair_of("verbs")


@pytest.mark.parametrize("call", ["recv", "recv_many"])
def test_a_recv_interrupted_at_any_point_after_its_tensor_came_keeps_it(verbs_pair, call):
    """A recv on grpc+verbs interrupted (Ctrl-C) after the native core handed it the tensors
    (they were there already), anywhere in the Python code that makes the results, gives
    them back: the retry gets them. Before, they were lost."""
    worker, step, points = verbs_pair.worker, 3000 if call == "recv" else 4000, 0
    names = _names(call)
    while True:
        step += 1
        _send(verbs_pair, names, step)  # offered before the recv asks
        where = interrupt_at(points + 1, _recv(worker, call, names, step, 30), RESULT_CODE)
        if where is None or where.startswith(PUBLIC_RETURN):
            break  # (past the public call's return, its caller has the results)
        points += 1
        _each_kept(worker, names, step, where)
    assert points > 3, points  # the results' making was traced


#: what a recv_async's future runs as it settles itself with a tensor the native core kept
FUTURE_CODE = ("tensorverbs/rendezvous/future.py", "tensorverbs/verbs/rendezvous.py",
               "tensorverbs/rendezvous/delivery.py", "tensorverbs/rendezvous/recv_call.py",
               "tensorverbs/metrics/recvs.py")


def test_a_future_interrupted_at_any_point_of_taking_its_tensor_keeps_it(verbs_pair):
    """``result()`` of a recv_async on grpc+verbs whose tensor the native core kept for it,
    interrupted (Ctrl-C) anywhere in the Python code that settles the future: the future
    still gets the tensor, or, cancelled then, the next recv of it does."""
    worker, step, points = verbs_pair.worker, 5000, 0
    while True:
        step += 1
        _send(verbs_pair, ["a"], step)  # offered before the recv asks
        fut = worker.recv_async("a", PS, step, timeout=30)
        where = interrupt_at(points + 1, lambda: fut.result(30), FUTURE_CODE)
        if where is None:
            break
        points += 1
        if fut.cancel():
            try:
                got = worker.recv("a", PS, step, timeout=30)
            except DeadlineExceededError:
                pytest.fail(f"the tensor was lost after an interrupt at the {where} and a cancel")
        else:
            got = fut.result(30)
        assert same(got, pattern(NBYTES, step)), f"wrong tensor after an interrupt at the {where}"
    assert points > 3, points  # the settling was traced


#: what a recv_async on grpc+verbs runs to start (its call, its future, the native recv)
ASYNC_START_CODE = ("tensorverbs/recv_calls.py", "tensorverbs/verbs/rendezvous.py",
                    "tensorverbs/rendezvous/future.py", "tensorverbs/rendezvous/recv_call.py",
                    "tensorverbs/errors.py")


def test_a_recv_async_interrupted_at_any_point_of_its_start_keeps_its_tensor(verbs_pair):
    """A recv_async on grpc+verbs interrupted (Ctrl-C) anywhere as it starts, also as the
    native recv tells its future its handle: the tensor, offered before, goes to the next
    recv of it (or to the future, if the call returned it)."""
    worker, step, points = verbs_pair.worker, 6000, 0
    while True:
        step += 1
        _send(verbs_pair, ["a"], step)  # offered before the recv asks
        started = []
        where = interrupt_at(points + 1, lambda: started.append(worker.recv_async("a", PS, step, timeout=30)),
                             ASYNC_START_CODE)
        if where is None or where.startswith(PUBLIC_RETURN):
            break  # (past the public call's return, its caller has the future)
        points += 1
        if started and not started[0].cancel():
            got = started[0].result(30)
        else:
            try:
                got = worker.recv("a", PS, step, timeout=30)
            except DeadlineExceededError:
                pytest.fail(f"the tensor was lost after an interrupt at the {where}")
        assert same(got, pattern(NBYTES, step)), f"wrong tensor after an interrupt at the {where}"
    assert points > 3, points  # the start was traced


class _TracedCore:
    """The native core of a task with its recv calls returning through Python: CPython runs a
    signal's handler as a native call returns, which no trace event shows; this makes that
    point one (the return of these methods)."""

    def __init__(self, core) -> None:
        self._core = core
        for name in dir(core):  # the rest as it is (no Python runs to reach it)
            if not name.startswith("_") and name not in ("recv", "recv_many"):
                setattr(self, name, getattr(core, name))

    def recv(self, *args):
        return self._core.recv(*args)

    def recv_many(self, *args):
        return self._core.recv_many(*args)


@pytest.mark.parametrize("call", ["recv", "recv_many"])
def test_a_recv_interrupted_as_the_native_call_returns_keeps_its_tensor(verbs_pair, call):
    """A signal whose handler runs as the native recv returns its answers (Ctrl-C during
    the last moments of the call: the handler runs right after it) gives them back: the
    retry gets them. Before, they were lost: the answers were put in hand after the call."""
    worker, step, wheres = verbs_pair.worker, 7000 if call == "recv" else 8000, []
    names = _names(call)
    rendezvous = worker._rendezvous
    rendezvous.core = _TracedCore(rendezvous.core)
    try:
        while True:
            step += 1
            _send(verbs_pair, names, step)  # offered before the recv asks
            where = interrupt_at(len(wheres) + 1, _recv(worker, call, names, step, 30), (__file__,))
            if where is None or where.startswith("return of <lambda>"):
                break  # (the public call returned: its caller has the results)
            wheres.append(where)
            _each_kept(worker, names, step, where)
    finally:
        rendezvous.core = rendezvous.core._core
    assert any(where.startswith(f"return of {call} at ") for where in wheres), wheres



#: what opens a tensor passed by handle (a part of what makes a recv's result)
SHARED_CODE = ("tensorverbs/ipc/shared_tensors.py", "tensorverbs/ipc/stand_in_ipc.py")


@pytest.fixture(scope="module")
def ipc_pair():
    p = start_pair("grpc+verbs", {"TENSORVERBS_PROVIDER": "soft"}, device_ipc=True)
    yield p
    p.worker.stop()
    p.ps.stop()


@pytest.mark.parametrize("call", ["recv", "recv_many"])
def test_a_recv_interrupted_after_it_opened_a_tensor_passed_by_handle_keeps_it(ipc_pair, call):
    """A recv on grpc+verbs of tensors passed by handle (the stand-in's), interrupted
    (Ctrl-C) anywhere in the Python code that opens them and makes the results, gives
    them back: the retry opens them again. Before, the descriptor went back to the core
    after the receiver had told its sender to free the tensor: the retry failed ("shared
    tensor ... is gone")."""
    worker, step, wheres = ipc_pair.worker, 9000 if call == "recv" else 9500, []
    names = _names(call)
    while True:
        step += 1
        for i, name in enumerate(names):  # offered before the recv asks
            ipc_pair.ps.send(name, STAND_IN.from_host(pattern(NBYTES, step + i)), WORKER, step)
        where = interrupt_at(len(wheres) + 1, _recv(worker, call, names, step, 30), RESULT_CODE + SHARED_CODE)
        if where is None or where.startswith(PUBLIC_RETURN):
            break  # (past the public call's return, its caller has the results)
        wheres.append(where)
        _released_before(ipc_pair, step, len(names))
        _each_kept(worker, names, step, where)
    assert any(where.startswith("return of deliver at shared_tensors.py") for where in wheres), wheres


def _released_before(ipc_pair, step: int, kept: int) -> None:
    """Receive one more tensor by handle and wait until the sender holds at most ``kept``
    exports: it freed every export the worker had told it of before (releases go in order)."""
    ipc_pair.ps.send("sync", STAND_IN.from_host(pattern(NBYTES, 0)), WORKER, step)
    assert same(ipc_pair.worker.recv("sync", PS, step, timeout=30), pattern(NBYTES, 0))
    deadline = time.monotonic() + 30
    while ipc_pair.ps.stats()["ipc_exports"] > kept:
        assert time.monotonic() < deadline, "the sender did not free the export released"
        time.sleep(0.01)
