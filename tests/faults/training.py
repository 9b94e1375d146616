"""One training step between the ps and the worker, each half run by its own task (the
ps's through ``TaskProcess.run("training:ps_step", ...)``): the ps publishes its weights,
the worker takes them and returns its gradients. Every tensor is a pattern both ends
rebuild, so every byte is checked."""
from __future__ import annotations

from tensorverbs.local_cluster import pattern, same

PS = "/job:ps/replica:0/task:0"
WORKER = "/job:worker/replica:0/task:0"
#: the bytes of the tensors of a step, each way
SIZES = (4 << 10, 256 << 10, 2 << 20)


def _seed(kind: int, step: int, i: int) -> int:
    return kind * 1_000_000 + step * 10 + i


def _check(what: str, step: int, got, nbytes: int, seed: int) -> None:
    if not same(got, pattern(nbytes, seed)):
        raise AssertionError(f"{what} at step {step}: the bytes received differ from those sent")


def ps_step(server, step: int, timeout: float) -> bool:
    """The ps's half: send the weights, take the gradients."""
    for i, nbytes in enumerate(SIZES):
        server.send(f"w{i}", pattern(nbytes, _seed(1, step, i)), to=WORKER, step_id=step)
    futures = [server.recv_async(f"g{i}", source=WORKER, step_id=step, timeout=timeout)
               for i in range(len(SIZES))]
    for i, (nbytes, fut) in enumerate(zip(SIZES, futures)):
        _check(f"gradient g{i}", step, fut.result(), nbytes, _seed(2, step, i))
    return True


def worker_step(server, step: int, timeout: float) -> None:
    """The worker's half: take the weights, send the gradients."""
    futures = [server.recv_async(f"w{i}", source=PS, step_id=step, timeout=timeout)
               for i in range(len(SIZES))]
    for i, (nbytes, fut) in enumerate(zip(SIZES, futures)):
        _check(f"weight w{i}", step, fut.result(), nbytes, _seed(1, step, i))
    for i, nbytes in enumerate(SIZES):
        server.send(f"g{i}", pattern(nbytes, _seed(2, step, i)), to=PS, step_id=step)


def send_many(server, step: int, count: int, nbytes: int) -> int:
    """Send ``t0``.. ``t<count-1>`` to the worker, tensor i being ``pattern(nbytes, i)``."""
    for i in range(count):
        server.send(f"t{i}", pattern(nbytes, i), to=WORKER, step_id=step)
    return count
