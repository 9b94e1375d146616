"""A relayed tensor that its receiver fetched but could not pass on (no memory for its host
copy, which the relay's children and late receivers get) is neither lost nor a hang: the
recv fails saying why, and the next recv of it gets the tensor, once."""
from __future__ import annotations

import concurrent.futures

import numpy as np
import pytest

import tensorverbs as tv
import tensorverbs.rendezvous.relay_receiver as relay_receiver
from receivers import TRAINER, receiver_names, trainer_and_receivers
from tensorverbs.local_cluster import pattern, same

WAIT = 60.0
RECEIVER = receiver_names(1)[0]


# -- in the receiver's process (TaskProcess.run) ----------------------------------------------
def recv_with_a_failing_host_copy(server: tv.Server, name: str, nbytes: int, step: int, into_out: bool
                                  ) -> tuple[str, str]:
    """Receive ``name`` (relayed, served to late receivers; into an ``out`` if ``into_out``)
    while the host copy made to pass it on raises MemoryError once; then receive it again: (the first recv's error type, or
    "hung"/"returned"; what the next recvs got: "retried", "lost" or "twice")."""
    prepare = relay_receiver.prepare

    def failing_once(array):
        relay_receiver.prepare = prepare
        raise MemoryError("no memory for the host copy")

    relay_receiver.prepare = failing_once
    try:
        out = np.zeros(nbytes, np.uint8) if into_out else None
        first = server.recv_async(name, TRAINER, step, 10.0, out=out).exception(WAIT)
        what = "returned" if first is None else type(first).__name__
    except concurrent.futures.TimeoutError:
        what = "hung"
    finally:
        relay_receiver.prepare = prepare
    try:
        again = server.recv(name, TRAINER, step, 5.0)
    except tv.DeadlineExceededError:
        return what, "lost"
    assert same(again, pattern(nbytes, step)), "wrong bytes"
    try:
        server.recv(name, TRAINER, step, 0.5)
        return what, "twice"
    except tv.DeadlineExceededError:
        return what, "retried"


# -- in the trainer's (this) process ----------------------------------------------------------
@pytest.fixture(scope="module", params=["grpc", "verbs"])
def job(request):
    with trainer_and_receivers(request.param, 1) as job:
        yield job


@pytest.mark.parametrize("into_out", [False, True], ids=["result", "out"])
def test_a_relayed_tensor_that_could_not_be_passed_on_fails_its_recv_and_goes_to_the_next(job, into_out):
    trainer, (receiver,) = job
    nbytes, step = 64 << 10, 200 if into_out else 100
    handle = trainer.send("w", pattern(nbytes, step), to=[RECEIVER], step_id=step, relay=True, late=True)
    assert receiver.run(f"{__name__}:recv_with_a_failing_host_copy", "w", nbytes, step, into_out) == \
        ("ResourceExhaustedError", "retried")
    handle.wait(timeout=WAIT)
