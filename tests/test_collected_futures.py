"""A recv future dropped unread in a reference cycle is freed by the garbage collector, in
whatever thread allocates when a collection is due, which may hold a lock that giving its
tensor back takes (a relay's): the collection does not deadlock, and the tensor is given
back (on a thread of its own, soon after) to the next recv of it."""
from __future__ import annotations

import concurrent.futures
import gc
import threading

import numpy as np

import tensorverbs as tv
from receivers import TRAINER, receiver_names, trainer_and_receivers, until
from tensorverbs.local_cluster import pattern, same

WAIT = 60.0
RECEIVERS = receiver_names(2)
NBYTES = 64 << 10


# -- in a receiver's process (TaskProcess.run) ------------------------------------------------
def drop_in_a_cycle_then_collect_under_the_relays_lock(server: tv.Server, name: str, step: int) -> tuple[bool, bool]:
    """Receive ``name`` (relayed), drop the future unread in a reference cycle, and collect
    it with the relay's lock held (as an allocation under that lock would): (whether the
    collection ended, whether the next recv got the tensor)."""
    receiver = server._rt.relays._receiver
    gc.disable()  # (collected below, and only there)
    try:
        fut = server.recv_async(name, TRAINER, step, WAIT)
        concurrent.futures.wait([fut], WAIT)
        cycle: list = [fut]
        cycle.append(cycle)
        del fut, cycle

        def collect() -> None:
            with receiver._lock:
                gc.collect()

        collecting = threading.Thread(target=collect, daemon=True)
        collecting.start()
        collecting.join(WAIT)  # (a bound on a deadlock, not a timing)
        if collecting.is_alive():
            return False, False
    finally:
        gc.enable()
    until(receiver.followed, "the collected future's tensor was not given back")  # (on a thread of its own)
    return True, same(server.recv(name, TRAINER, step, WAIT), pattern(NBYTES, step))


# -- in the trainer's (this) process ----------------------------------------------------------
def test_a_relayed_recv_future_collected_under_the_relays_lock_gives_its_tensor_back(step):
    with trainer_and_receivers("grpc", len(RECEIVERS)) as (trainer, receivers):
        handle = trainer.send("w0", pattern(NBYTES, step), to=RECEIVERS, step_id=step, relay=True)
        receivers[1].post("run", "test_relay:recv_all", ["w0"], [NBYTES], step)
        assert receivers[0].run(f"{__name__}:drop_in_a_cycle_then_collect_under_the_relays_lock", "w0", step) == \
            (True, True)
        assert receivers[1].result(WAIT) == [True]
        handle.wait(timeout=WAIT)
