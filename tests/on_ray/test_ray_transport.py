"""tensorverbs as a Ray Direct Transport: torch tensors from one actor's method reach
another actor through the actors' tensorverbs servers, and an aborted transfer fails
its pending recvs."""
from __future__ import annotations

import concurrent.futures
import os
import time

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="the Ray integration needs ray (pip install 'tensorverbs[ray]')")
torch = pytest.importorskip("torch", reason="the Ray integration moves torch tensors")

import tensorverbs as tv  # noqa: E402
from tensorverbs.local_cluster import pattern  # noqa: E402
from tensorverbs.ray import register_transport  # noqa: E402
from tensorverbs.ray.transport import (  # noqa: E402
    TensorverbsCommunicatorMetadata, TensorverbsTransportMetadata,
)

BIG = 64 << 20
#: the transports registered for this module, by protocol
NAMES = {"grpc+verbs": "TENSORVERBS", "grpc": "TENSORVERBS_GRPC"}


def _tensors(seed: int, nbytes: int = BIG) -> list:
    """A float32 matrix of ``nbytes`` and a small bfloat16 vector, from ``seed``."""
    big = torch.from_numpy(pattern(nbytes, seed)).view(torch.float32).reshape(64, -1)
    small = torch.from_numpy(pattern(6, seed + 1)).view(torch.bfloat16)
    return [big, small]


def _kill(actor) -> None:
    """Kill ``actor`` (no restart) and return once its process is gone: ``ray.kill``
    returns before the kill reaches it (through the GCS), and it may answer calls
    meanwhile; and Ray calls it dead before its process exited, whose tensorverbs server
    may answer meanwhile."""
    pid = ray.get(actor.pid.remote(), timeout=120)
    ray.kill(actor)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            ray.get(actor.__ray_ready__.remote(), timeout=120)
        except ray.exceptions.RayActorError:
            if _exited(pid):
                return
        time.sleep(0.05)  # (a poll: Ray tells nothing when the process is gone)
    raise AssertionError("the actor did not die")


def _exited(pid: int) -> bool:
    """Whether process ``pid`` (of this host) exited (a zombie not yet reaped has)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(") ", 1)[1][:1] in "ZX"
    except FileNotFoundError:
        return True


def _made(ref) -> None:
    """Return once the task behind ``ref`` ended and the driver holds its tensors' transport
    metadata. Ray learns the two apart: ``ray.wait`` can return before the metadata came, and a
    task given ``ref`` then would not start the transfer with it but wait for the object in the
    actor's thread (and fail after Ray's own 60 s, not through the transport)."""
    assert ray.wait([ref], fetch_local=False, timeout=120)[0]
    rdt = ray._private.worker.global_worker.rdt_manager
    assert rdt.wait_for_tensor_transport_metadata(ref.hex(), timeout=120) is not None


def _manager(name: str):
    from ray.experimental.rdt.util import get_tensor_transport_manager

    return get_tensor_transport_manager(name)


@ray.remote(enable_tensor_transport=True)
class Actor:
    def make(self, seed: int, nbytes: int = BIG) -> list:
        return _tensors(seed, nbytes)

    def check(self, tensors: list, seed: int, nbytes: int = BIG) -> bool:
        """Whether ``tensors`` (received through the transport) are what ``make`` made."""
        return all(got.dtype == want.dtype and got.shape == want.shape
                   and np.array_equal(got.view(torch.uint8).numpy(), want.view(torch.uint8).numpy())
                   for got, want in zip(tensors, _tensors(seed, nbytes), strict=True))

    def pid(self) -> int:
        return os.getpid()

    def has_rdt_manager(self) -> bool:
        return ray._private.worker.global_worker._rdt_manager is not None

    def bytes_received(self, name: str) -> int:
        return _manager(name).server.get().stats()["bytes_received"]

    def registered(self, name: str) -> int:
        return _manager(name).registered()

    def endpoint(self, name: str) -> tuple[str, str]:
        return _manager(name).server.endpoint()

    def abort_a_pending_recv(self, name: str, source: tuple[str, str]) -> str:
        """Receive an object ``source`` never sends and abort the transfer as Ray does:
        the error the recv raised."""
        manager = _manager(name)
        task, address = source
        meta = TensorverbsTransportMetadata(tensor_meta=[((4,), torch.float32)], tensor_device="cpu",
                                            obj_id="never-sent", source=task, address=address)
        comm = TensorverbsCommunicatorMetadata(destination=ray.get_runtime_context().current_actor)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            recv = pool.submit(manager.recv_multiple_tensors, "never-sent", meta, comm)
            manager.abort_transport("never-sent", comm)
            try:
                recv.result(timeout=60)
            except tv.TensorverbsError as exc:
                return repr(exc)
        return "the recv succeeded"


@pytest.fixture(scope="module")
def transports(ray_cluster):
    """Both protocols' transports, registered before the actors are made."""
    for protocol, name in NAMES.items():
        register_transport(name, protocol)
    return NAMES


@pytest.mark.parametrize("protocol", list(NAMES))
def test_an_actors_tensors_reach_another_actor(transports, protocol):
    name = transports[protocol]
    source, destination = Actor.remote(), Actor.remote()
    tensors = source.make.options(tensor_transport=name).remote(seed=3)
    assert ray.get(destination.check.remote(tensors, 3), timeout=240)
    assert ray.get(destination.bytes_received.remote(name)) >= BIG  # through tensorverbs
    assert ray.get(destination.check.remote(tensors, 3), timeout=240)  # the same object again


def test_a_fresh_actor_has_its_rdt_manager_before_its_first_transfer(transports):
    """Ray makes a worker's RDT manager on first use, without a lock; a fresh actor's first
    transfer used it from two threads at once, and now and then the task that took the
    object waited in a second manager for what the recv had put in the first, until Ray's
    60 s passed. The transport makes it when Ray registers the transport on the actor,
    which Ray does before the actor's first transfer."""
    actor = Actor.remote()
    ray._private.worker.global_worker.rdt_manager.wait_until_custom_transports_registered(actor)
    assert ray.get(actor.has_rdt_manager.remote(), timeout=120)


@pytest.mark.parametrize("protocol", list(NAMES))
def test_an_aborted_transfer_fails_its_recv(transports, protocol):
    name = transports[protocol]
    source, destination = Actor.remote(), Actor.remote()
    # a first transfer has Ray register the transport in both actors
    assert ray.get(destination.check.remote(source.make.options(tensor_transport=name).remote(1, 4096), 1, 4096))
    error = ray.get(destination.abort_a_pending_recv.remote(name, ray.get(source.endpoint.remote(name))),
                    timeout=120)
    assert error.startswith("AbortedError") and "Ray aborted the transfer of object never-sent" in error


def test_a_source_that_dies_fails_the_transfer(transports):
    name = transports["grpc+verbs"]
    source, destination = Actor.remote(), Actor.remote()
    tensors = source.make.options(tensor_transport=name).remote(seed=5)
    _made(tensors)
    _kill(source)
    # Ray sees the send fail and aborts the transfer, or the recv finds the source's server
    # gone: the recv fails, it does not wait on until Ray gives up
    with pytest.raises((tv.AbortedError, tv.UnavailableError)):
        ray.get(destination.check.remote(tensors, 5), timeout=180)


@ray.remote
class Plain:
    """An actor declared without ``enable_tensor_transport=True``."""

    def check(self, tensors: list, seed: int, nbytes: int) -> bool:
        return _same(tensors, _tensors(seed, nbytes))

    def pid(self) -> int:
        return os.getpid()


def test_an_actor_without_the_option_is_refused_and_lives_on(transports):
    name = transports["grpc+verbs"]
    source, destination = Actor.remote(), Plain.remote()
    pid = ray.get(destination.pid.remote(), timeout=120)
    tensors = source.make.options(tensor_transport=name).remote(seed=11, nbytes=4096)
    _made(tensors)  # so that its recv runs in the actor before the task
    with pytest.raises(tv.FailedPreconditionError, match=r"enable_tensor_transport=True"):
        ray.get(destination.check.remote(tensors, 11, 4096), timeout=120)
    assert ray.get(destination.pid.remote(), timeout=120) == pid  # the same process: it lives on


@pytest.fixture(scope="module")
def read_transport(transports):
    """The one-sided transport (registered beside the two-sided ones, before the actors)."""
    return register_transport("TENSORVERBS_READ", "grpc+verbs", one_sided=True)


def _same(got: list, want: list) -> bool:
    return all(g.dtype == w.dtype and g.shape == w.shape
               and np.array_equal(g.view(torch.uint8).numpy(), w.view(torch.uint8).numpy())
               for g, w in zip(got, want, strict=True))


def test_one_sided_the_driver_and_actors_read_an_actors_tensors(read_transport):
    source, destination = Actor.remote(), Actor.remote()
    tensors = source.make.options(tensor_transport=read_transport).remote(seed=7, nbytes=4 << 20)
    assert _same(ray.get(tensors, timeout=240), _tensors(7, 4 << 20))  # in the driver
    assert _manager(read_transport).server.get().stats()["remote_reads"] == 2  # by reads
    assert ray.get(destination.check.remote(tensors, 7, 4 << 20), timeout=240)
    assert ray.get(source.registered.remote(read_transport)) == 1
    del tensors  # Ray collects the object on its source, which unregisters its tensors
    deadline = time.monotonic() + 120
    while ray.get(source.registered.remote(read_transport)):
        assert time.monotonic() < deadline, "the source kept the object's tensors registered"
        time.sleep(0.05)


def test_one_sided_a_source_that_died_fails_the_read(read_transport):
    source = Actor.remote()
    tensors = source.make.options(tensor_transport=read_transport).remote(seed=9, nbytes=4096)
    _made(tensors)
    _kill(source)
    with pytest.raises((tv.UnavailableError, ray.exceptions.RayError)):
        ray.get(tensors, timeout=180)
