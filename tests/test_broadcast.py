"""Broadcast: ``send(..., to=[task, ...])`` offers one tensor to several receivers, each in
a process of its own, its bytes registered once for all (grpc+verbs); the handle completes
when every receiver has it and a failure names the receivers that did not."""
from __future__ import annotations

import numpy as np
import pytest

import tensorverbs as tv
from receivers import TRAINER, receiver_names, trainer_and_receivers
from tensorverbs.local_cluster import pattern
from variants import VARIANTS

WAIT = 60.0
RECEIVERS = receiver_names(3)
#: an inline tensor, one staged into the pool, one large enough to be registered
SIZES = [16, 16 << 10, 2 << 20]


@pytest.fixture(scope="module")
def job(variant):
    """(the trainer, here; its three receivers, each in a process of its own)."""
    with trainer_and_receivers(variant, len(RECEIVERS)) as job:
        yield job


@pytest.mark.parametrize("nbytes", SIZES)
def test_every_receiver_gets_the_broadcast_tensor(job, step, nbytes):
    trainer, receivers = job
    handle = trainer.send("w", pattern(nbytes, step), to=RECEIVERS, step_id=step)
    assert not handle.done()  # nobody asked yet
    for i, receiver in enumerate(receivers[:-1]):
        assert receiver.recv_pattern("w", TRAINER, step, nbytes, step, timeout=WAIT), RECEIVERS[i]
    with pytest.raises(tv.DeadlineExceededError) as waited:  # the last has not asked
        handle.wait(timeout=0.05)
    assert RECEIVERS[-1] in str(waited.value) and RECEIVERS[0] not in str(waited.value)
    assert receivers[-1].recv_pattern("w", TRAINER, step, nbytes, step, timeout=WAIT)
    handle.wait(timeout=WAIT)
    assert handle.done() and handle.exception(timeout=0) is None
    trainer.flush(timeout=WAIT)


def test_a_broadcast_registers_its_bytes_once(job, step, variant):
    """A tensor too large to stage is registered once for all its receivers, where
    separate sends register it once each."""
    if VARIANTS[variant][0] != "grpc+verbs":
        pytest.skip("grpc registers nothing")
    trainer, receivers = job
    tensor = pattern(2 << 20, step)

    def registrations(send) -> int:
        before = trainer.stats()["source_registrations"]
        send()
        for receiver in receivers:
            assert receiver.recv_pattern("w", TRAINER, step, tensor.nbytes, step, timeout=WAIT)
        trainer.flush(timeout=WAIT)
        return trainer.stats()["source_registrations"] - before

    assert registrations(lambda: trainer.send("w", tensor, to=RECEIVERS, step_id=step)) == 1
    trainer.cleanup_step(step)
    assert registrations(lambda: [trainer.send("w", tensor, to=r, step_id=step) for r in RECEIVERS]) == 3


def test_a_broadcast_fails_naming_the_receivers_that_did_not_get_it(job, step):
    trainer, receivers = job
    handle = trainer.send("w", pattern(4096, step), to=RECEIVERS, step_id=step)
    assert receivers[0].recv_pattern("w", TRAINER, step, 4096, step, timeout=WAIT)
    trainer.cleanup_step(step)  # the others never asked
    error = handle.exception(timeout=WAIT)
    assert isinstance(error, tv.AbortedError)
    assert RECEIVERS[1] in str(error) and RECEIVERS[2] in str(error) and RECEIVERS[0] not in str(error)
    with pytest.raises(tv.AbortedError):
        handle.wait(timeout=0)


def test_a_broadcast_at_an_aborted_step_fails_naming_every_receiver(job, step):
    trainer, receivers = job
    trainer.abort_step(step, "the step went wrong")
    with pytest.raises(tv.AbortedError) as raised:
        trainer.send("w", pattern(4096, step), to=RECEIVERS, step_id=step)
    assert all(receiver in str(raised.value) for receiver in RECEIVERS), raised.value
    trainer.flush(timeout=WAIT)  # nothing left open


@pytest.mark.parametrize("to, what", [
    ([], "no task"),
    ([RECEIVERS[0], RECEIVERS[0]], "twice"),
    ([RECEIVERS[0], "/job:nobody/task:0"], "not in the cluster"),
    (5, "a task or a list of tasks"),
])
def test_a_bad_list_of_receivers_is_refused(job, step, to, what):
    trainer, _ = job
    with pytest.raises(tv.InvalidArgumentError, match=what):
        trainer.send("w", np.arange(4), to=to, step_id=step)
    assert trainer.pending()[0] == 0  # nothing was offered


def test_a_task_given_as_a_task_name_is_one_receiver(job, step):
    """A TaskName (as ``cluster.tasks()`` gives them) is one task, not a list of them."""
    trainer, receivers = job
    task = tv.ClusterSpec(trainer.cluster).resolve(RECEIVERS[0])
    handle = trainer.send("w", pattern(64, step), to=task, step_id=step)
    assert receivers[0].recv_pattern("w", TRAINER, step, 64, step, timeout=WAIT)
    handle.wait(timeout=WAIT)
