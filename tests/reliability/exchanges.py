"""What the tasks of the reliability suite do, run in their own processes through
``TaskProcess.run("exchanges:<function>", ...)``: each function takes the task's Server
first. Every tensor is a deterministic pattern both ends can rebuild, so every byte
received is checked."""
from __future__ import annotations

import concurrent.futures
import math
import os
import resource
import time

import numpy as np

from tensorverbs.local_cluster import pattern, same

PS = "/job:ps/replica:0/task:0"
TIMEOUT = 30.0

#: (name, shape) of the tensors of one AlexNet-shaped step: AlexNet's convolutions and a
#: smaller classifier (about 15 MiB each way per worker and step)
SHAPES = [
    ("conv1/w", (64, 3, 11, 11)), ("conv1/b", (64,)), ("conv2/w", (192, 64, 5, 5)),
    ("conv2/b", (192,)), ("conv3/w", (384, 192, 3, 3)), ("conv3/b", (384,)),
    ("conv4/w", (256, 384, 3, 3)), ("conv4/b", (256,)), ("conv5/w", (256, 256, 3, 3)),
    ("conv5/b", (256,)), ("fc6/w", (512, 2304)), ("fc6/b", (512,)), ("fc7/w", (512, 512)),
    ("fc7/b", (512,)), ("fc8/w", (100, 512)), ("fc8/b", (100,)),
]

_pending: dict[str, list[concurrent.futures.Future]] = {}


def worker(index: int) -> str:
    return f"/job:worker/replica:0/task:{index}"


def tensor(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """The float32 pattern of ``shape`` for ``seed``."""
    return pattern(4 * math.prod(shape), seed, np.float32).reshape(shape)


def _weight_seed(step: int, i: int) -> int:
    return step * 1000 + i


def _grad_seed(index: int, step: int, i: int) -> int:
    return 1_000_000 + index * 100_000 + step * 1000 + i


def _check(what: str, got: np.ndarray, want: np.ndarray) -> None:
    if not same(got, want):
        raise AssertionError(f"{what}: the bytes received differ from the bytes sent")


# -- two tasks ---------------------------------------------------------------------------------
def swap(server, peer: str, step: int, nbytes: int, seed_out: int, seed_in: int) -> bool:
    """Send a tensor to ``peer`` and receive the one it sends here, at once."""
    server.send("swap", pattern(nbytes, seed_out), to=peer, step_id=step)
    _check(f"swap at step {step}", server.recv("swap", source=peer, step_id=step, timeout=TIMEOUT),
           pattern(nbytes, seed_in))
    return True


# -- a parameter-server job ----------------------------------------------------------------------
def ps_steps(server, workers: int, first: int, steps: int) -> int:
    """Each step: publish the weights to every worker, then take every worker's gradients."""
    for step in range(first, first + steps):
        for w in range(workers):
            for i, (name, shape) in enumerate(SHAPES):
                server.send("w/" + name, tensor(shape, _weight_seed(step, i)), to=worker(w), step_id=step)
        futures = {(w, i): server.recv_async("g/" + name, source=worker(w), step_id=step, timeout=TIMEOUT)
                   for w in range(workers) for i, (name, _) in enumerate(SHAPES)}
        for (w, i), fut in futures.items():
            name, shape = SHAPES[i]
            _check(f"gradient {name} of worker {w} at step {step}", fut.result(),
                   tensor(shape, _grad_seed(w, step, i)))
    return steps


def worker_steps(server, index: int, first: int, steps: int) -> int:
    """Each step: take the weights, then send this worker's gradients."""
    for step in range(first, first + steps):
        futures = [server.recv_async("w/" + name, source=PS, step_id=step, timeout=TIMEOUT)
                   for name, _ in SHAPES]
        for i, fut in enumerate(futures):
            name, shape = SHAPES[i]
            _check(f"weight {name} at step {step}", fut.result(), tensor(shape, _weight_seed(step, i)))
        for i, (name, shape) in enumerate(SHAPES):
            server.send("g/" + name, tensor(shape, _grad_seed(index, step, i)), to=PS, step_id=step)
    return steps


# -- many tensors ------------------------------------------------------------------------------
def begin_recvs(server, tag: str, source: str, step: int, count: int, timeout: float = TIMEOUT) -> int:
    """Start ``count`` recvs of ``t0``.. from ``source`` and keep them under ``tag``."""
    _pending[tag] = [server.recv_async(f"t{i}", source=source, step_id=step, timeout=timeout)
                     for i in range(count)]
    return count


def finish_recvs(server, tag: str, nbytes: int, seed: int = 0) -> int:
    """Wait for the recvs started under ``tag``; check tensor i is ``pattern(nbytes, seed + i)``."""
    for i, fut in enumerate(_pending.pop(tag)):
        _check(f"tensor t{i}", fut.result(), pattern(nbytes, seed + i))
    return i + 1


def send_many(server, to: str, step: int, count: int, nbytes: int, seed: int = 0) -> int:
    """Send ``t0``.. ``t<count-1>``, tensor i being ``pattern(nbytes, seed + i)``."""
    for i in range(count):
        server.send(f"t{i}", pattern(nbytes, seed + i), to=to, step_id=step)
    return count


def send_cycling(server, to: str, step: int, count: int, nbytes: int, distinct: int = 16) -> int:
    """Send ``t0``.. ``t<count-1>``, tensor i being ``pattern(nbytes, i % distinct)``: many
    large tensors from ``distinct`` arrays."""
    arrays = [pattern(nbytes, seed) for seed in range(distinct)]
    for i in range(count):
        server.send(f"t{i}", arrays[i % distinct], to=to, step_id=step)
    return count


def finish_cycling(server, tag: str, nbytes: int, distinct: int = 16) -> int:
    """Wait for the recvs started under ``tag`` as they complete (dropping each result);
    check tensor i is ``pattern(nbytes, i % distinct)``."""
    futures = _pending.pop(tag)
    index = {fut: i for i, fut in enumerate(futures)}
    arrays = [pattern(nbytes, seed) for seed in range(distinct)]
    for fut in concurrent.futures.as_completed(futures, timeout=10 * TIMEOUT):
        i = index.pop(fut)
        _check(f"tensor t{i}", fut.result(), arrays[i % distinct])
    return len(futures)


# -- a long run --------------------------------------------------------------------------------
def soak(server, peer: str, sends_first: bool, steps: int, samples: int) -> list[tuple[int, int, int]]:
    """``steps`` steps of a small exchange with ``peer`` (a 4 KiB and a 256 KiB tensor each
    way), never cleaning a step up; (step, RSS bytes, pool bytes in use) at ``samples``
    evenly spaced steps."""
    small, large = pattern(4096, 1), pattern(256 << 10, 2)
    every = max(1, steps // samples)
    marks = []
    for step in range(steps):
        def give() -> None:
            server.send("small", small, to=peer, step_id=step)
            server.send("large", large, to=peer, step_id=step)

        def take() -> None:
            a = server.recv_async("small", source=peer, step_id=step, timeout=TIMEOUT)
            b = server.recv_async("large", source=peer, step_id=step, timeout=TIMEOUT)
            if step % every == 0:
                _check(f"small at step {step}", a.result(), small)
                _check(f"large at step {step}", b.result(), large)
            else:
                a.result(), b.result()

        if sends_first:
            give(), take()
        else:
            take(), give()
        if step % every == every - 1:
            marks.append((step, rss_bytes(), settled_pool(server)))
    return marks


def settled_pool(server, within: float = 2.0) -> int:
    """The pool bytes ``server`` keeps in use once what is in flight settled: the least
    seen within ``within`` seconds (0 ends the wait). A busy machine releases a step's
    buffers late (the peer takes a send late, a release thread runs late); a leak stays."""
    deadline, least = time.monotonic() + within, None
    while True:
        in_use = server.stats().get("pool_in_use_bytes", 0)
        least = in_use if least is None else min(least, in_use)
        if least == 0 or time.monotonic() >= deadline:
            return least
        time.sleep(0.01)


def rss_bytes() -> int:
    """This process's resident set size."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def recv_short_of_memory(server, source: str, step: int, nbytes: int, headroom: int) -> str:
    """Receive a tensor of ``nbytes`` for the ``cpu:proxy`` device (landing, then a copy)
    with this process's address space capped at its size plus ``headroom`` bytes: the
    name of the error the recv raised (the cap is lifted afterwards)."""
    with open("/proc/self/statm") as f:
        size = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (size + headroom, resource.RLIM_INFINITY))
    try:
        server.recv("big", source=source, step_id=step, device="cpu:proxy")
    except Exception as exc:
        return type(exc).__name__
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    return "no error"


def threaded(server, peer: str, seed: int, peer_seed: int, threads: int, per_thread: int,
             nbytes: int) -> int:
    """``threads`` user threads each receive ``per_thread`` tensors from ``peer`` in turn
    while one more thread sends ``peer`` as many; the peer runs the same."""
    def send() -> None:
        for i in range(per_thread):
            for t in range(threads):
                server.send(f"x/{t}/{i}", pattern(nbytes, seed + t * per_thread + i), to=peer)

    def receive(t: int) -> int:
        for i in range(per_thread):
            got = server.recv(f"x/{t}/{i}", source=peer, timeout=TIMEOUT)
            _check(f"x/{t}/{i}", got, pattern(nbytes, peer_seed + t * per_thread + i))
        return per_thread

    with concurrent.futures.ThreadPoolExecutor(threads + 1) as pool:
        sender = pool.submit(send)
        received = [pool.submit(receive, t) for t in range(threads)]
        sender.result()
        return sum(f.result() for f in received)


def await_ends(server, tag: str, nbytes: int, within: float) -> tuple[int, int]:
    """Every recv started under ``tag`` must end within ``within`` seconds from now, with
    its tensor or with UnavailableError: (received, unavailable)."""
    import time

    import tensorverbs as tv

    deadline = time.monotonic() + within
    received = unavailable = 0
    for i, fut in enumerate(_pending.pop(tag)):
        try:
            got = fut.result(timeout=max(0.0, deadline - time.monotonic()))
        except concurrent.futures.TimeoutError:
            raise AssertionError(f"recv of t{i} did not end within {within:g} s") from None
        except tv.UnavailableError:
            unavailable += 1
            continue
        _check(f"tensor t{i}", got, pattern(nbytes, i))
        received += 1
    return received, unavailable


def wait_received(server, tag: str, nbytes: int, wanted: list[int]) -> list[int]:
    """Wait until the recvs ``wanted`` (indices) of those started under ``tag`` have their
    tensor; check every tensor that arrived. Returns the indices of those that did."""
    futures = _pending[tag]
    concurrent.futures.wait([futures[i] for i in wanted], TIMEOUT)
    done = [i for i, fut in enumerate(futures) if fut.done()]
    for i in done:
        _check(f"tensor t{i}", futures[i].result(), pattern(nbytes, i))
    return done


def wait_taken(server) -> None:
    """Wait until no tensor of this sender waits in its table (all taken by a receiver)."""
    import time

    deadline = time.monotonic() + TIMEOUT
    while server.pending()[0] and time.monotonic() < deadline:
        time.sleep(0.01)


def wait_delivered(server, sent: int, waiting: int = 0) -> tuple[int, int]:
    """Wait until this sender counts ``sent`` tensors delivered and ``waiting`` in its
    table: (delivered, waiting) then, or when TIMEOUT passed."""
    import time

    deadline = time.monotonic() + TIMEOUT
    while True:
        now = server.stats()["tensors_sent"], server.pending()[0]
        if now == (sent, waiting) or time.monotonic() > deadline:
            return now
        time.sleep(0.01)


def wait_fewer_waiters(server, n: int, within: float = 60.0) -> None:
    """Block until fewer than ``n`` recvs wait in ``server``'s local table (a condition,
    polled): a peer's recvs withdrawn."""
    import time

    deadline = time.monotonic() + within
    while server.pending()[1] >= n:
        if time.monotonic() > deadline:
            raise AssertionError(f"{n} or more recvs still waited after {within:g} s")
        time.sleep(0.005)
