"""Actors that Ray restarts: a restarted actor's server comes back on another port under
the same task name, and the actors it exchanges tensors with find it there."""
from __future__ import annotations

import secrets
import time

import pytest

ray = pytest.importorskip("ray", reason="the Ray integration needs ray (pip install 'tensorverbs[ray]')")
torch = pytest.importorskip("torch", reason="the Ray integration moves torch tensors")

from ray.exceptions import ActorUnavailableError, RayActorError  # noqa: E402

from tensorverbs.ray import register_transport  # noqa: E402

NAMES = {"grpc+verbs": "TENSORVERBS_RESTARTS", "grpc": "TENSORVERBS_RESTARTS_GRPC"}
WAIT = 120


def _manager(name: str):
    from ray.experimental.rdt.util import get_tensor_transport_manager

    return get_tensor_transport_manager(name)


def _tensor(seed: int) -> torch.Tensor:
    return torch.arange(1024, dtype=torch.float32) + seed


@ray.remote(enable_tensor_transport=True, max_restarts=1, max_task_retries=3)
class Peer:
    def __init__(self) -> None:
        # Ray registers a custom transport on an actor once, not again in its restarted
        # process: the actor registers them itself
        for protocol, name in NAMES.items():
            register_transport(name, protocol)
        self._incarnation = secrets.token_hex(8)

    def incarnation(self) -> str:
        """This process's token: a restarted actor answers another one."""
        return self._incarnation

    def make(self, seed: int) -> torch.Tensor:
        return _tensor(seed)

    def check(self, tensor: torch.Tensor, seed: int) -> bool:
        return bool(torch.equal(tensor, _tensor(seed)))

    def endpoint(self, name: str) -> tuple[str, str]:
        """(task name, host:port) of this actor's server of transport ``name``."""
        return _manager(name).server.endpoint()

    def address_of(self, name: str, task: str) -> str:
        """Where this actor's server of transport ``name`` reaches ``task``."""
        return _manager(name).server.get().cluster.address(task)


@pytest.fixture(scope="module")
def transports(ray_cluster):
    for protocol, name in NAMES.items():
        register_transport(name, protocol)
    return NAMES


def _restart(actor) -> None:
    """Kill ``actor`` and return once its restarted process answers. ``ray.kill`` returns
    before the kill reaches the actor (through the GCS): the old process may answer calls
    meanwhile, and one that restarts during the test's next transfer has Ray retry its task
    without the transfer (the retry waits 60 s for a tensor that never comes)."""
    before = ray.get(actor.incarnation.remote(), timeout=WAIT)
    ray.kill(actor, no_restart=False)
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        try:
            if ray.get(actor.incarnation.remote(), timeout=WAIT) != before:
                return
        except (ActorUnavailableError, RayActorError):
            pass
        time.sleep(0.05)  # (a poll: Ray tells nothing when the restarted process is up)
    raise AssertionError("the actor did not restart")


@pytest.mark.parametrize("protocol", list(NAMES))
def test_a_restarted_actor_is_found_again(transports, protocol):
    name = transports[protocol]
    a, b = Peer.remote(), Peer.remote()
    assert ray.get(b.check.remote(a.make.options(tensor_transport=name).remote(1), 1), timeout=WAIT)
    task_a, before = ray.get(a.endpoint.remote(name), timeout=WAIT)
    _restart(a)  # the source comes back on another port
    assert ray.get(b.check.remote(a.make.options(tensor_transport=name).remote(2), 2), timeout=WAIT)
    task_again, after = ray.get(a.endpoint.remote(name), timeout=WAIT)
    assert task_again == task_a and after != before
    assert ray.get(b.address_of.remote(name, task_a), timeout=WAIT) == after
    task_b, b_before = ray.get(b.endpoint.remote(name), timeout=WAIT)
    _restart(b)  # the destination comes back on another port
    assert ray.get(b.check.remote(a.make.options(tensor_transport=name).remote(3), 3), timeout=WAIT)
    _, b_after = ray.get(b.endpoint.remote(name), timeout=WAIT)
    assert b_after != b_before
    # a sent to b without calling it (a send is passive, b pulled): a calls b once b is
    # the source, at b's new address, not at the one a had a channel to before
    assert ray.get(a.check.remote(b.make.options(tensor_transport=name).remote(4), 4), timeout=WAIT)
    assert ray.get(a.address_of.remote(name, task_b), timeout=WAIT) == b_after
