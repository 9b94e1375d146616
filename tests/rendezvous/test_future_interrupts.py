"""A recv's future interrupted (Ctrl-C) at any point of a wait for it stays usable: its lock
is free, so the thread that settles it does not block for good, and a later wait gets the
result. Before, its lock was a ``threading.Condition``, whose ``__exit__`` is Python code:
a signal handled as it began left the lock held, and the event loop's thread, settling
the future, blocked on it (a recv_many interrupted so lost its other recvs)."""
from __future__ import annotations

import threading

from tensorverbs.errors import DeadlineExceededError
from tensorverbs.rendezvous.future import RecvFuture

from interrupt_points import interrupt_at

#: the modules a wait for a future runs in
WAIT_CODE = ("tensorverbs/rendezvous/future.py", "tensorverbs/rendezvous/completion.py",
             "concurrent/futures/_base.py", "threading.py")


def _wait_briefly(fut: RecvFuture) -> None:
    try:
        fut.exception(0.005)
    except DeadlineExceededError:
        pass


def test_an_interrupt_at_any_point_of_a_wait_leaves_the_future_usable():
    points = 0
    while True:
        fut = RecvFuture()
        where = interrupt_at(points + 1, lambda: _wait_briefly(fut), WAIT_CODE)
        if where is None:
            break
        points += 1
        settler = threading.Thread(target=fut.set_result, args=(points,), daemon=True)
        settler.start()
        settler.join(10)
        assert not settler.is_alive(), f"settling blocked on the lock after an interrupt at the {where}"
        assert fut.result(1) == points
    assert points > 10  # the wait was traced
