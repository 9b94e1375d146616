"""A recv of a relayed tensor that was kept for it (the first recv's future was dropped
unread), interrupted (Ctrl-C) at any point of the relay's code it runs, loses no tensor and
delivers none twice: either the interrupted recv returned it, or a retry gets it."""
from __future__ import annotations

import concurrent.futures
import time

import pytest

import tensorverbs as tv
from interrupt_points import interrupt_at
from receivers import TRAINER, receiver_names, trainer_and_receivers
from tensorverbs.cluster import parse_task
from tensorverbs.local_cluster import pattern, same

WAIT = 60.0
RECEIVER = receiver_names(1)[0]
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
    deadline = time.monotonic() + WAIT
    while not _kept(server, name, step):
        assert time.monotonic() < deadline, "the dropped recv's tensor was not kept"
        time.sleep(0.005)
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


# -- in the trainer's (this) process ----------------------------------------------------------
@pytest.fixture(scope="module")
def job():
    """(the trainer, here; its receiver, in a process of its own)."""
    with trainer_and_receivers("grpc", 1) as job:
        yield job


@pytest.mark.parametrize("nbytes", SIZES)
def test_a_recv_of_a_kept_relayed_tensor_interrupted_at_any_point_loses_it_not(job, nbytes):
    trainer, (receiver,) = job
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
