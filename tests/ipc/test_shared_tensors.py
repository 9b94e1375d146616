"""Tensors passed by handle between two tasks of one host, on every protocol variant.

The ``cpu:proxy`` stand-in runs the protocol of CUDA IPC (export, descriptor, open, copy
out, release) where no GPU exists; the CUDA tests run where torch sees a GPU."""
from __future__ import annotations

import contextlib
import functools
import gc
import threading
import time
from typing import Callable, Iterator

import grpc
import numpy as np
import pytest

import tensorverbs as tv
from tensorverbs import _core
from tensorverbs.devices import STAND_IN, StandInArray
from tensorverbs.ipc.descriptor import STAND_IN as KIND, SharedTensorDescriptor
from tensorverbs.ipc.host_registry import HostRegistry
from tensorverbs.local_cluster import cluster_spec, pattern, same
from tensorverbs.rendezvous import future as futures
from tensorverbs.rendezvous.key import RendezvousKey
from tensorverbs.rendezvous.local import Value
from tensorverbs.rpc import tensorverbs_pb2 as pb
from tensorverbs.rpc.options import RELEASE_BATCH, method
from interrupt_points import interrupt_at
from variants import VARIANTS, start_pair

TIMEOUT = 60


@pytest.fixture(scope="module")
def ipc_pair(variant):
    """The two tasks of ``pair``, both sharing the stand-in device."""
    protocol, env = VARIANTS[variant]
    p = start_pair(protocol, env, device_ipc=True)
    yield p
    p.worker.stop()
    p.ps.stop()


def stand_in(nbytes: int, seed: int) -> StandInArray:
    return STAND_IN.from_host(pattern(nbytes, seed, "float32"))


def released(server) -> bool:
    """Whether every tensor ``server`` (a Server, or a TaskProcess) exported was released
    (waits for the receivers' ReleaseSharedTensor, which follows their recv; fails after
    TIMEOUT)."""
    deadline = time.monotonic() + TIMEOUT
    while server.stats()["ipc_exports"] and time.monotonic() < deadline:
        time.sleep(0.01)
    return server.stats()["ipc_exports"] == 0


@pytest.mark.parametrize("nbytes", [4, 1 << 20], ids=["4B", "1MiB"])
def test_a_stand_in_tensor_is_passed_by_handle(ipc_pair, step, nbytes):
    w0, p0 = ipc_pair.worker.stats(), ipc_pair.ps.stats()
    ipc_pair.worker.send("x", stand_in(nbytes, 1), to=ipc_pair.PS, step_id=step)
    got = ipc_pair.ps.recv("x", ipc_pair.WORKER, step, timeout=TIMEOUT, device="cpu:proxy")
    assert isinstance(got, StandInArray) and same(got.view(np.ndarray), pattern(nbytes, 1, "float32"))
    w1, p1 = ipc_pair.worker.stats(), ipc_pair.ps.stats()
    assert (w1["ipc_sent"] - w0["ipc_sent"], p1["ipc_received"] - p0["ipc_received"]) == (1, 1)
    # no host proxy on either side
    assert (w1["proxy_copies"], p1["proxy_copies"]) == (w0["proxy_copies"], p0["proxy_copies"])
    assert released(ipc_pair.worker)


def test_a_batch_by_handle_is_released_in_full(ipc_pair, step):
    """The receiver tells the sender of the tensors it copied out in a few calls (one in
    flight at a time, each carrying what was released until it went): every export of a
    batch is freed, also those released while a call was under way."""
    n = 300
    w0 = ipc_pair.worker.stats()
    ipc_pair.worker.send_many([(f"b{i}", stand_in(4096, i), ipc_pair.PS, step) for i in range(n)])
    got = ipc_pair.ps.recv_many([(f"b{i}", ipc_pair.WORKER, step) for i in range(n)], timeout=TIMEOUT,
                                device="cpu:proxy")
    assert all(same(g.view(np.ndarray), pattern(4096, i, "float32")) for i, g in enumerate(got))
    assert ipc_pair.worker.stats()["ipc_sent"] - w0["ipc_sent"] == n
    assert released(ipc_pair.worker)
    # one at a time too: each recv's release may come while the last call is under way
    for i in range(20):
        ipc_pair.worker.send(f"one{i}", stand_in(4096, i), to=ipc_pair.PS, step_id=step)
        one = ipc_pair.ps.recv(f"one{i}", ipc_pair.WORKER, step, timeout=TIMEOUT, device="cpu:proxy")
        assert same(one.view(np.ndarray), pattern(4096, i, "float32"))
    assert released(ipc_pair.worker)


@pytest.mark.parametrize("protocol", ["grpc", "grpc+verbs"])
def test_a_receiver_that_stops_at_once_still_releases_what_it_received(protocol, step):
    """A receiver collects its releases for a moment before it tells the sender: stopping
    right after a recv, it tells the sender before its channels close (the sender would
    otherwise hold its copy until the step ends)."""
    p = start_pair(protocol, {}, device_ipc=True)
    try:
        p.worker.send("x", stand_in(4096, 3), to=p.PS, step_id=step)
        got = p.ps.recv("x", p.WORKER, step, timeout=TIMEOUT, device="cpu:proxy")
        assert same(got.view(np.ndarray), pattern(4096, 3, "float32"))
        p.ps.stop()
        assert released(p.worker)
    finally:
        p.worker.stop()
        p.ps.stop()


def test_a_release_of_too_many_exports_at_once_is_refused(step):
    """ReleaseSharedTensor carries at most RELEASE_BATCH exports (a peer of the job cannot
    make a task pop millions under its lock); the task goes on serving."""
    cluster = cluster_spec({"ps": 1})
    with tv.Server(cluster, "ps", 0, device_ipc=True) as server:
        with grpc.insecure_channel(cluster["ps"][0]) as channel:
            release = channel.unary_unary(method("ReleaseSharedTensor"),
                                          request_serializer=pb.ReleaseSharedTensorRequest.SerializeToString,
                                          response_deserializer=pb.ReleaseSharedTensorResponse.FromString)
            with pytest.raises(grpc.RpcError) as refused:
                release(pb.ReleaseSharedTensorRequest(incarnation=server.incarnation,
                                                      export_ids=range(RELEASE_BATCH + 1)), timeout=TIMEOUT)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "at most" in refused.value.details()
            release(pb.ReleaseSharedTensorRequest(incarnation=server.incarnation, export_ids=range(10)),
                    timeout=TIMEOUT)
        server.send("x", np.arange(4, dtype=np.float32), to=server.task, step_id=step)
        assert same(server.recv("x", server.task, step, timeout=TIMEOUT), np.arange(4, dtype=np.float32))


def test_the_sender_may_change_its_tensor_once_sent(ipc_pair, step):
    tensor = stand_in(4096, 2)
    ipc_pair.worker.send("x", tensor, to=ipc_pair.PS, step_id=step)
    tensor[:] = -1
    got = ipc_pair.ps.recv("x", ipc_pair.WORKER, step, timeout=TIMEOUT, device="cpu:proxy")
    assert same(got.view(np.ndarray), pattern(4096, 2, "float32"))


def test_received_by_handle_asynchronously_on_the_host(ipc_pair, step):
    before = ipc_pair.worker.stats()["ipc_received"]
    ipc_pair.ps.send("y", stand_in(1 << 16, 3), to=ipc_pair.WORKER, step_id=step)
    got = ipc_pair.worker.recv_async("y", ipc_pair.PS, step, timeout=TIMEOUT).result(TIMEOUT)
    assert type(got) is np.ndarray and same(got, pattern(1 << 16, 3, "float32"))
    assert ipc_pair.worker.stats()["ipc_received"] == before + 1
    assert released(ipc_pair.ps)


def test_received_by_handle_for_a_callback_of_a_dropped_future(ipc_pair, step):
    """A future whose caller keeps only its callback: the tensor passed by handle is opened
    on the peer's lane after the core let the future go, and still reaches the callback."""
    ipc_pair.ps.send_pattern("warm", ipc_pair.WORKER, step, 16, 0)  # the channel is up: a
    assert same(ipc_pair.worker.recv("warm", ipc_pair.PS, step, timeout=TIMEOUT), pattern(16, 0))
    ipc_pair.ps.send("z", stand_in(1 << 16, 4), to=ipc_pair.WORKER, step_id=step)  # direct recv
    came, got = threading.Event(), []
    ipc_pair.worker.recv_async("z", ipc_pair.PS, step, timeout=TIMEOUT).add_done_callback(
        lambda fut: (got.append(fut.exception() or fut.result()), came.set()))
    gc.collect()
    assert came.wait(TIMEOUT)
    assert type(got[0]) is np.ndarray, got[0] and same(got[0], pattern(1 << 16, 4, "float32"))
    assert released(ipc_pair.ps)


def test_a_callback_added_as_the_descriptor_is_being_settled_is_called_once_the_future_is_dropped(
        ipc_pair, step):
    """A descriptor that came before anything looked at its future is settled as it comes
    (the settler thread holds the future weakly: a future dropped unlooked-at takes nothing);
    a callback added while the settler is at it keeps the future, and is called, also once
    its caller dropped it. (The settler is held at the start of the settle here.)"""
    if ipc_pair.protocol == "grpc":
        pytest.skip("a grpc recv's answer is never parked in the core")
    entered, go = threading.Event(), threading.Event()

    def held_settle(ref, *answer):
        entered.set()
        go.wait(TIMEOUT)
        return futures._settle_variant(ref, *answer)

    ipc_pair.ps.send_pattern("warm", ipc_pair.WORKER, step, 16, 0)  # the channel is up
    assert same(ipc_pair.worker.recv("warm", ipc_pair.PS, step, timeout=TIMEOUT), pattern(16, 0))
    ipc_pair.ps.send("z", stand_in(1 << 16, 6), to=ipc_pair.WORKER, step_id=step)
    came, got = threading.Event(), []
    _core.set_variant_settle(held_settle)
    try:
        fut = ipc_pair.worker.recv_async("z", ipc_pair.PS, step, timeout=TIMEOUT)
        assert entered.wait(TIMEOUT)  # the descriptor came: the settler is at it
        fut.add_done_callback(lambda fut: (got.append(fut.exception() or fut.result()), came.set()))
        del fut
        gc.collect()
    finally:
        _core.set_variant_settle(futures._settle_variant)
        go.set()
    assert came.wait(TIMEOUT)
    assert type(got[0]) is np.ndarray and same(got[0], pattern(1 << 16, 6, "float32")), got[0]
    assert released(ipc_pair.ps)


@contextlib.contextmanager
def told_of_its_recv_late(then: Callable[[], None] = lambda: None) -> Iterator[None]:
    """While in it, a parked recv's future is told which native recv it has (settled_by)
    only once the settler thread is done with a descriptor that came for it; ``then`` runs
    just before (it may raise, as an interrupting signal's handler would)."""
    settled = threading.Event()

    def noted_settle(ref, *answer):
        try:
            return futures._settle_variant(ref, *answer)
        finally:
            settled.set()

    told = futures.RecvFuture.settled_by

    def told_late(fut, native, parked=None):
        if parked is not None:
            assert settled.wait(TIMEOUT)
            then()
        return told(fut, native, parked)

    _core.set_variant_settle(noted_settle)
    futures.RecvFuture.settled_by = told_late
    try:
        yield
    finally:
        futures.RecvFuture.settled_by = told
        _core.set_variant_settle(futures._settle_variant)


class Interrupted(Exception):
    """What a signal's handler raised."""


def _interrupt() -> None:
    raise Interrupted


def test_a_descriptor_that_comes_before_its_future_knows_its_recv_still_settles_it(ipc_pair, step):
    """A recv_async's answer can reach the core's settler thread before its future is told
    which native recv it has (the recv starts first: a tensor the sender holds already
    comes at once): a descriptor, settled as it comes, still settles the future."""
    if ipc_pair.protocol == "grpc":
        pytest.skip("a grpc recv's answer is never parked in the core")
    ipc_pair.ps.send_pattern("warm", ipc_pair.WORKER, step, 16, 0)  # the channel is up
    assert same(ipc_pair.worker.recv("warm", ipc_pair.PS, step, timeout=TIMEOUT), pattern(16, 0))
    ipc_pair.ps.send("z", stand_in(1 << 16, 7), to=ipc_pair.WORKER, step_id=step)
    with told_of_its_recv_late():
        fut = ipc_pair.worker.recv_async("z", ipc_pair.PS, step, timeout=TIMEOUT)
    assert same(fut.result(TIMEOUT), pattern(1 << 16, 7, "float32"))
    assert released(ipc_pair.ps)


def test_a_recv_interrupted_before_its_future_took_the_descriptor_that_came_leaves_it_for_the_next(
        ipc_pair, step):
    """An interruption (a signal's handler raising) as the recv starts, after its descriptor
    came and before its future took it: the next recv of the key gets the tensor."""
    if ipc_pair.protocol == "grpc":
        pytest.skip("a grpc recv's answer is never parked in the core")
    ipc_pair.ps.send_pattern("warm", ipc_pair.WORKER, step, 16, 0)  # the channel is up
    assert same(ipc_pair.worker.recv("warm", ipc_pair.PS, step, timeout=TIMEOUT), pattern(16, 0))
    ipc_pair.ps.send("z", stand_in(1 << 16, 8), to=ipc_pair.WORKER, step_id=step)
    with told_of_its_recv_late(_interrupt), pytest.raises(Interrupted):
        ipc_pair.worker.recv_async("z", ipc_pair.PS, step, timeout=TIMEOUT)
    assert same(ipc_pair.worker.recv("z", ipc_pair.PS, step, timeout=TIMEOUT), pattern(1 << 16, 8, "float32"))
    assert released(ipc_pair.ps)


#: what a send passed by handle runs below the public call
SEND_CODE = ("tensorverbs/rendezvous/sending.py", "tensorverbs/verbs/rendezvous.py",
             "tensorverbs/rendezvous/remote.py", "tensorverbs/ipc/shared_tensors.py")


def test_a_send_by_handle_interrupted_at_any_point_never_withdraws_what_went_out(ipc_pair, step):
    """Ctrl-C at any point of a send passed by handle: a send that went out (its receiver
    asks for it) delivers the tensor, whatever the interrupt did; one that did not is not
    there (its export freed or left to its step's end)."""
    nbytes, points, at = 4096, 0, step * 1000
    while True:
        at += 1
        before = ipc_pair.worker.pending()[0]
        send = functools.partial(ipc_pair.worker.send, "i", stand_in(nbytes, at % 97), ipc_pair.PS, at)
        where = interrupt_at(points + 1, send, SEND_CODE)
        if where is None:
            ipc_pair.worker.cleanup_step(at)  # (sent whole: nobody asks for it)
            break
        points += 1
        if ipc_pair.worker.pending()[0] > before:  # it went out
            try:
                got = ipc_pair.ps.recv("i", ipc_pair.WORKER, at, timeout=TIMEOUT)
            except tv.TensorverbsError as exc:
                pytest.fail(f"the tensor sent was lost after an interrupt at the {where}: {exc}")
            assert same(got, pattern(nbytes, at % 97, "float32")), f"wrong after an interrupt at the {where}"
        ipc_pair.worker.cleanup_step(at)
    assert points > 3  # the send was traced
    assert released(ipc_pair.worker)  # what did not go out, its step's end freed


@pytest.mark.parametrize("on", ["host", "cpu:proxy"])
def test_received_by_handle_into_out(ipc_pair, step, on):
    nbytes = 1 << 18
    out = np.zeros(nbytes // 4, np.float32)
    out = STAND_IN.from_host(out) if on == "cpu:proxy" else out
    ipc_pair.ps.send("z", stand_in(nbytes, 4), to=ipc_pair.WORKER, step_id=step)
    assert ipc_pair.worker.recv("z", ipc_pair.PS, step, timeout=TIMEOUT, out=out) is out
    assert same(np.asarray(out.view(np.ndarray)), pattern(nbytes, 4, "float32"))
    assert released(ipc_pair.ps)


def test_an_out_that_does_not_fit_refuses_and_the_tensor_is_kept(ipc_pair, step):
    ipc_pair.ps.send("w", stand_in(64, 5), to=ipc_pair.WORKER, step_id=step)
    with pytest.raises(tv.InvalidArgumentError, match=r"out expects float32 \(3,\), the sender sent float32 \(16,\)"):
        ipc_pair.worker.recv("w", ipc_pair.PS, step, timeout=TIMEOUT, out=np.zeros(3, np.float32))
    out = np.zeros(16, np.float32)
    assert ipc_pair.worker.recv_async("w", ipc_pair.PS, step, timeout=TIMEOUT, out=out).result(TIMEOUT) is out
    assert same(out, pattern(64, 5, "float32"))
    assert released(ipc_pair.ps)


@pytest.mark.parametrize("end", ["cleanup_step", "abort_step"])
def test_the_end_of_a_step_frees_what_was_not_received(ipc_pair, step, end):
    before = ipc_pair.worker.stats()["ipc_exports"]
    ipc_pair.worker.send("never", stand_in(4096, 6), to=ipc_pair.PS, step_id=step)
    assert ipc_pair.worker.stats()["ipc_exports"] == before + 1
    getattr(ipc_pair.worker, end)(step)
    assert ipc_pair.worker.stats()["ipc_exports"] == before


def test_a_malformed_descriptor_fails_the_recv(ipc_pair, step):
    worker = ipc_pair.worker
    key = RendezvousKey(worker.cluster.resolve(ipc_pair.WORKER), worker.incarnation,
                        worker.cluster.resolve(ipc_pair.PS), "bad")
    good = SharedTensorDescriptor(KIND, 1, (4,), worker.incarnation, 1 << 40, "cpu:proxy", (b"../x",))
    worker._rendezvous.send(step, key, Value(good.encode()))
    with pytest.raises(tv.DataLossError, match="valid file name"):
        ipc_pair.ps.recv("bad", ipc_pair.WORKER, step, timeout=TIMEOUT, device="cpu:proxy")
    worker._rendezvous.send(step, key, Value(good.encode()[:-3]))
    with pytest.raises(tv.DataLossError, match="cut short"):
        ipc_pair.ps.recv("bad", ipc_pair.WORKER, step, timeout=TIMEOUT)


def test_a_task_that_does_not_share_gets_host_proxies(variant, step):
    protocol, env = VARIANTS[variant]
    p = start_pair(protocol, env)  # the worker shares CUDA only; the ps likewise
    try:
        before = p.worker.stats()
        p.worker.send("x", stand_in(4096, 7), to=p.PS, step_id=step)
        got = p.ps.recv("x", p.WORKER, step, timeout=TIMEOUT, device="cpu:proxy")
        assert same(got.view(np.ndarray), pattern(4096, 7, "float32"))
        after = p.worker.stats()
        assert after["ipc_sent"] == before["ipc_sent"] and after["proxy_copies"] == before["proxy_copies"] + 1
    finally:
        p.worker.stop()
        p.ps.stop()


def test_a_stopped_task_leaves_the_host_registry():
    cluster = cluster_spec({"worker": 1})
    address = cluster["worker"][0]
    server = tv.Server(cluster, "worker", 0, device_ipc=True)
    registry = HostRegistry()
    assert registry.sees(address, "cpu:proxy")
    server.stop()
    assert not registry.sees(address, "cpu:proxy")


def test_a_task_that_cannot_start_leaves_the_entry_of_the_one_at_its_address():
    cluster = cluster_spec({"worker": 1})
    address = cluster["worker"][0]
    with tv.Server(cluster, "worker", 0, device_ipc=True):
        with pytest.raises(tv.UnavailableError, match="cannot listen"):
            tv.Server(cluster, "worker", 0, device_ipc=True)  # the port is taken
        assert HostRegistry().sees(address, "cpu:proxy")


def _cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA GPU here")
    return torch


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float8_e5m2"])
def test_cuda_tensor_by_cuda_ipc(pair, step, dtype):
    torch = _cuda()
    tensor = torch.arange(1 << 20, dtype=torch.float32, device="cuda:0").to(getattr(torch, dtype))
    # the ps uses the GPU first, so that the host knows it sees it
    warm = torch.zeros(4, device="cuda:0")
    pair.worker.send("warm", warm, to=pair.PS, step_id=step)
    assert np.array_equal(pair.ps.recv("warm", pair.WORKER, step, timeout=TIMEOUT, device="cuda:0").cpu().numpy(),
                          np.zeros(4, np.float32))
    before = pair.worker.stats()["ipc_sent"]
    pair.worker.send("gpu", tensor, to=pair.PS, step_id=step)
    back = pair.ps.recv("gpu", pair.WORKER, step, timeout=TIMEOUT, device="cuda:0")
    assert back.device.type == "cuda" and back.dtype == tensor.dtype
    assert torch.equal(back.view(torch.uint8).cpu(), tensor.view(torch.uint8).cpu())
    assert pair.worker.stats()["ipc_sent"] == before + 1
    assert released(pair.worker)


def test_cuda_out_by_cuda_ipc(pair, step):
    torch = _cuda()
    out = torch.zeros(1 << 18, device="cuda:0")
    pair.ps.send("gpu-warm", pattern(16, 1, "float32"), to=pair.WORKER, step_id=step)
    pair.worker.recv("gpu-warm", pair.PS, step, timeout=TIMEOUT, out=torch.zeros(4, device="cuda:0"))
    pair.ps.call("run", "cuda_peer:send_cuda_pattern", "gpu", pair.WORKER, step, 1 << 20, 9)
    assert pair.worker.recv("gpu", pair.PS, step, timeout=TIMEOUT, out=out) is out
    assert same(out.cpu().numpy(), pattern(1 << 20, 9, "float32"))  # NaNs among them
    assert pair.worker.stats()["ipc_received"] >= 1


def test_a_tensor_taken_by_handle_outlives_the_end_of_its_senders_step(ipc_pair, step):
    """A sender that waited for its send by handle (its receiver took the descriptor) and
    then cleaned its step up keeps its copy until the receiver opened it: here a parked
    recv_async (on grpc+verbs its answer waits in the core until the future is looked at)
    whose peer's lane is busy with a callback of an earlier recv."""
    worker, nbytes = ipc_pair.worker, 1 << 16
    blocking, gate = threading.Event(), threading.Event()
    busy = worker.recv_async("busy", ipc_pair.PS, step, timeout=TIMEOUT)
    busy.add_done_callback(lambda fut: (blocking.set(), gate.wait(TIMEOUT)))
    ipc_pair.ps.send_pattern("busy", ipc_pair.WORKER, step, 16, 0)
    assert blocking.wait(TIMEOUT)  # the lane of the ps runs the callback until the gate opens
    try:
        parked = worker.recv_async("x", ipc_pair.PS, step, timeout=TIMEOUT)
        ipc_pair.ps.run("stand_in_peer:send_wait_clean_up", "x", ipc_pair.WORKER, step, nbytes, 8)
    finally:
        gate.set()
    got = parked.result(TIMEOUT)
    assert same(got, pattern(nbytes, 8, "float32"))
    assert released(ipc_pair.ps)


def test_a_tensor_taken_by_handle_is_freed_once_its_receiver_is_gone(variant, step):
    """An export taken by a receiver that never opens it (its process ends first) outlives
    the end of its sender's step, and is freed once that process is gone."""
    protocol, env = VARIANTS[variant]
    p = start_pair(protocol, env, device_ipc=True)
    try:
        before = p.worker.stats()["ipc_exports"]
        p.worker.send("busy", pattern(16, 0), to=p.PS, step_id=step)
        p.ps.run("stand_in_peer:take_unopened", "busy", "x", p.WORKER, step)
        p.worker.send("x", stand_in(4096, 9), to=p.PS, step_id=step).wait(TIMEOUT)  # taken
        p.worker.cleanup_step(step)
        assert p.worker.stats()["ipc_exports"] == before + 1  # its receiver may still open it
        p.ps.kill()
        assert released(p.worker)
    finally:
        p.worker.stop()
        p.ps.stop()
