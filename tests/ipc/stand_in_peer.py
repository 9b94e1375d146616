"""What the tests of tensors passed by handle run in a task's child process (``TaskProcess.run``)."""
from __future__ import annotations

from tensorverbs.devices import STAND_IN
from tensorverbs.local_cluster import pattern

TIMEOUT = 60


def send_wait_clean_up(server, name: str, to: str, step_id: int, nbytes: int, seed: int) -> None:
    """Send the float32 pattern of ``nbytes`` and ``seed`` on the stand-in device, wait
    until its receiver took it, and clean its step up."""
    server.send(name, STAND_IN.from_host(pattern(nbytes, seed, "float32")), to, step_id).wait(TIMEOUT)
    server.cleanup_step(step_id)


#: what :func:`take_unopened` keeps: the lane's gate and the future of the recv it started
_taken: list = []


def take_unopened(server, busy: str, name: str, source: str, step_id: int) -> None:
    """Take tensor ``name`` from ``source`` without opening it: a recv_async of it waits
    for the lane of ``source``, which a callback of the recv of ``busy`` holds for good."""
    import threading

    holding, gate = threading.Event(), threading.Event()
    server.recv_async(busy, source, step_id, timeout=TIMEOUT).add_done_callback(
        lambda fut: (holding.set(), gate.wait()))
    if not holding.wait(TIMEOUT):
        raise TimeoutError(f"{busy!r} did not come")
    _taken.extend([gate, server.recv_async(name, source, step_id, timeout=TIMEOUT)])
