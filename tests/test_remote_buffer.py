"""One-sided access: a task registers a tensor and hands out its RemoteBuffer; another task
reads and writes it with RDMA READ/WRITE (the soft provider's same path on one host and
over TCP, ibverbs in the soft-RoCE lane) without the owner's code taking part, until the
owner unregisters it. The owner runs in a process of its own (tests/remote_buffers.py);
bytes are compared on both sides."""
from __future__ import annotations

import dataclasses
import gc
import pickle
import threading

import numpy as np
import pytest

import tensorverbs as tv
from one_sided_pairs import ONE_SIDED_VARIANTS, WAIT, register
from variants import pair_of
from tensorverbs import one_sided
from tensorverbs.devices import STAND_IN, StandInArray
from tensorverbs.local_cluster import pattern, same


@pytest.fixture(scope="module", params=ONE_SIDED_VARIANTS)
def pair(request):
    yield from pair_of(request.param)


#: one through the queue pair's own buffer, one registered for the access, one past a chunk of the bounce
SIZES = [4096, 3 << 20, (256 << 10) + 8]


@pytest.mark.parametrize("nbytes", SIZES)
def test_a_task_reads_a_buffer_another_registered(pair, step, nbytes):
    buffer = register(pair, nbytes, step)
    assert buffer.task == pair.PS and buffer.nbytes == nbytes
    got = pair.worker.read(buffer, timeout=WAIT)
    assert same(got, pattern(nbytes, step))
    out = np.zeros(nbytes, np.uint8)
    assert pair.worker.read(buffer, out, timeout=WAIT) is out
    assert same(out, pattern(nbytes, step))
    pair.ps.unregister(buffer)


@pytest.mark.parametrize("nbytes", SIZES)
def test_memory_allocated_for_one_sided_access_is_read_and_written(pair, step, nbytes):
    """A tensor of ``allocate(..., one_sided=True)`` (shared memory on one host) is
    registered without a registration of its own; peers read and write it alike."""
    buffer = register(pair, nbytes, step, allocated=True)
    assert same(pair.worker.read(buffer, timeout=WAIT), pattern(nbytes, step))
    pair.worker.write(buffer, pattern(nbytes // 2, step + 1), offset=nbytes // 4, timeout=WAIT)
    assert pair.ps.run("remote_buffers:holds", buffer, nbytes // 4, nbytes // 2, step + 1)
    pair.ps.unregister(buffer)
    with pytest.raises(tv.NotFoundError):
        pair.worker.read(buffer, timeout=WAIT)


def test_allocated_memory_is_the_servers_tensor_type(pair):
    array = pair.worker.allocate((3, 5), np.float16, one_sided=True)
    assert array.shape == (3, 5) and array.dtype == np.float16 and array.flags.writeable
    array[...] = 1.5
    buffer = pair.worker.register(array[1])  # a part of it
    assert buffer.nbytes == 10 and same(pair.worker.read(buffer, timeout=WAIT), array[1])
    pair.worker.unregister(buffer)


def test_a_read_gives_the_buffers_dtype_and_shape_and_ranges_of_it(pair, step):
    buffer = register(pair, 4 * 6 * 1000, step, dtype="float32", shape=(6, 1000))
    whole = pattern(4 * 6 * 1000, step, np.float32).reshape(6, 1000)
    got = pair.worker.read(buffer, timeout=WAIT)
    assert got.dtype == np.float32 and got.shape == (6, 1000) and same(got, whole)
    row = pair.worker.read(buffer, offset=4 * 1000 * 2, nbytes=4 * 1000, timeout=WAIT)
    assert same(row, whole[2])
    out = np.empty((2, 1000), np.float32)
    pair.worker.read(buffer, out, offset=4 * 1000 * 4, timeout=WAIT)
    assert same(out, whole[4:])
    with pytest.raises(tv.InvalidArgumentError, match="multiples"):
        pair.worker.read(buffer, offset=2, nbytes=8, timeout=WAIT)
    pair.ps.unregister(buffer)


def test_accesses_and_registrations_are_counted(pair, step):
    before = pair.worker.stats()
    registered = pair.ps.stats()["registered_buffers"]
    buffer = register(pair, 1000, step)
    assert pair.ps.stats()["registered_buffers"] == registered + 1
    pair.worker.read(buffer, timeout=WAIT)
    pair.worker.write(buffer, pattern(10, 1), offset=5, timeout=WAIT)
    after = pair.worker.stats()
    assert after["remote_reads"] - before["remote_reads"] == 1
    assert after["remote_bytes_read"] - before["remote_bytes_read"] == 1000
    assert after["remote_writes"] - before["remote_writes"] == 1
    assert after["remote_bytes_written"] - before["remote_bytes_written"] == 10
    pair.ps.unregister(buffer)
    assert pair.ps.stats()["registered_buffers"] == registered


@pytest.mark.parametrize("nbytes", SIZES)
def test_a_write_lands_in_the_owners_tensor(pair, step, nbytes):
    buffer = register(pair, nbytes + 100, step)
    pair.worker.write(buffer, pattern(nbytes, step + 1), offset=100, timeout=WAIT)
    assert pair.ps.run("remote_buffers:holds", buffer, 100, nbytes, step + 1)
    assert pair.ps.run("remote_buffers:holds", buffer, 0, 100, step)  # untouched
    pair.ps.unregister(buffer)


def test_many_buffers_are_read_in_one_call(pair, step):
    """Small and large buffers, whole or into out=, of the ps and of the worker itself."""
    sizes = [4096] * 50 + [3 << 20, 100, (256 << 10) + 8]
    buffers = [register(pair, n, step + i) for i, n in enumerate(sizes)]
    mine = pattern(1000, step).copy()
    own = pair.worker.register(mine)
    out = np.zeros(3 << 20, np.uint8)
    entries = [*buffers[:50], (buffers[50], out), (buffers[51],), (buffers[52], None, 8, 4096), own]
    got = pair.worker.read_many(entries, timeout=WAIT)
    assert len(got) == len(entries) and got[50] is out
    for i, n in enumerate(sizes[:52]):
        assert same(got[i], pattern(n, step + i)), i
    assert same(got[52], pattern(sizes[52], step + 52)[8:8 + 4096]) and same(got[53], mine)
    assert pair.worker.read_many([], timeout=WAIT) == []
    pair.ps.unregister(buffers[7])
    with pytest.raises(tv.NotFoundError, match="entry 7"):
        pair.worker.read_many(buffers[:10], timeout=WAIT)
    with pytest.raises(tv.NotFoundError, match="entry 8"):  # counted with the task's own entries
        pair.worker.read_many([own, *buffers[:10]], timeout=WAIT)
    with pytest.raises(tv.InvalidArgumentError, match="entry 1"):
        pair.worker.read_many([buffers[0], (buffers[1], None, 4000, 200)], timeout=WAIT)
    assert same(pair.worker.read_many(buffers[8:9], timeout=WAIT)[0], pattern(4096, step + 8))
    for buffer in buffers[:7] + buffers[8:]:
        pair.ps.unregister(buffer)
    pair.worker.unregister(own)


def test_a_large_read_lands_inside_memory_allocated_for_one_sided_access(pair, step):
    """``out`` a slice of allocated memory, past its start: the read lands in the slice."""
    buffer = register(pair, 1 << 20, step)
    memory = pair.worker.allocate(3 << 20, np.uint8, one_sided=True)
    memory[...] = 7
    pair.worker.read(buffer, memory[1 << 20:2 << 20], timeout=WAIT)
    assert same(memory[1 << 20:2 << 20], pattern(1 << 20, step))
    assert (memory[:1 << 20] == 7).all() and (memory[2 << 20:] == 7).all()
    pair.ps.unregister(buffer)


def test_an_unregistered_buffer_fails_and_leaves_the_task_working(pair, step):
    buffer = register(pair, 4096, step)
    assert same(pair.worker.read(buffer, timeout=WAIT), pattern(4096, step))
    pair.ps.unregister(buffer)
    with pytest.raises(tv.NotFoundError, match="unregistered") as failed:
        pair.worker.read(buffer, timeout=WAIT)
    assert pair.PS in str(failed.value)
    with pytest.raises(tv.NotFoundError):
        pair.worker.write(buffer, pattern(16, step), timeout=WAIT)
    with pytest.raises(tv.NotFoundError, match="not registered"):
        pair.ps.unregister(buffer)
    # the next access, and the tasks' tensors, go on as before
    other = register(pair, 4096, step + 1)
    assert same(pair.worker.read(other, timeout=WAIT), pattern(4096, step + 1))
    pair.ps.send_pattern("t", pair.WORKER, step, 4096, step)
    assert same(pair.worker.recv("t", pair.PS, step, timeout=WAIT), pattern(4096, step))
    pair.ps.unregister(other)


@pytest.mark.parametrize("forged", ["rkey", "addr", "nbytes"])
def test_a_forged_descriptor_reaches_nothing(pair, step, forged):
    buffer = register(pair, 64 << 10, step)
    bad = {"rkey": dataclasses.replace(buffer, rkey=buffer.rkey ^ 0x5a5a00),
           "addr": dataclasses.replace(buffer, addr=buffer.addr + (1 << 30)),
           "nbytes": dataclasses.replace(buffer, nbytes=buffer.nbytes + (1 << 20))}[forged]
    read = {"rkey": {}, "addr": {}, "nbytes": {"offset": buffer.nbytes, "nbytes": 4096}}[forged]
    with pytest.raises(tv.NotFoundError, match="cannot be reached"):
        pair.worker.read(bad, timeout=WAIT, **read)
    assert same(pair.worker.read(buffer, timeout=WAIT), pattern(64 << 10, step))
    pair.ps.unregister(buffer)


def test_a_descriptor_of_another_incarnation_is_stale(pair, step):
    buffer = register(pair, 4096, step)
    with pytest.raises(tv.UnavailableError, match="stale"):
        pair.worker.read(dataclasses.replace(buffer, incarnation=buffer.incarnation ^ 1), timeout=WAIT)
    assert same(pair.worker.read(buffer, timeout=WAIT), pattern(4096, step))
    pair.ps.unregister(buffer)


def test_a_read_only_buffer_refuses_writes(pair, step):
    buffer = register(pair, 4096, step, writable=False)
    with pytest.raises(tv.FailedPreconditionError, match="read-only"):
        pair.worker.write(buffer, pattern(16, 0), timeout=WAIT)
    # a descriptor that claims write access reaches nothing writable
    with pytest.raises(tv.NotFoundError):
        pair.worker.write(dataclasses.replace(buffer, writable=True), pattern(16, 0), timeout=WAIT)
    assert same(pair.worker.read(buffer, timeout=WAIT), pattern(4096, step))
    pair.ps.unregister(buffer)


def test_accesses_out_of_bounds_or_malformed_are_refused_before_anything_moves(pair, step):
    buffer = register(pair, 4096, step)
    worker = pair.worker
    with pytest.raises(tv.InvalidArgumentError, match="out of bounds"):
        worker.read(buffer, offset=4000, nbytes=100, timeout=WAIT)
    with pytest.raises(tv.InvalidArgumentError, match="out of bounds"):
        worker.read(buffer, np.empty(4097, np.uint8), timeout=WAIT)
    with pytest.raises(tv.InvalidArgumentError, match="out of bounds"):
        worker.write(buffer, pattern(100, 1), offset=4000, timeout=WAIT)
    with pytest.raises(tv.InvalidArgumentError, match="offset"):
        worker.read(buffer, offset=-1, timeout=WAIT)
    with pytest.raises(tv.InvalidArgumentError, match="RemoteBuffer"):
        worker.read({"task": pair.PS}, timeout=WAIT)
    with pytest.raises(tv.InvalidArgumentError, match="C-contiguous"):
        worker.read(buffer, np.empty((64, 128), np.uint8)[:, ::2], timeout=WAIT)
    with pytest.raises(tv.InvalidArgumentError, match="writable"):
        worker.read(buffer, _read_only(4096), timeout=WAIT)
    with pytest.raises(tv.NotFoundError, match="not in this cluster"):
        worker.read(dataclasses.replace(buffer, task="/job:nobody/replica:0/task:0"), timeout=WAIT)
    assert worker.pending() == (0, 0)
    assert same(worker.read(buffer, timeout=WAIT), pattern(4096, step))
    pair.ps.unregister(buffer)


def _read_only(nbytes: int) -> np.ndarray:
    array = np.empty(nbytes, np.uint8)
    array.setflags(write=False)
    return array


def test_a_descriptor_crosses_processes_as_it_is(pair, step):
    buffer = register(pair, 4096, step)
    assert pickle.loads(pickle.dumps(buffer)) == buffer
    assert tv.RemoteBuffer(**dataclasses.asdict(buffer)) == buffer
    pair.ps.unregister(buffer)


def test_a_task_reads_and_writes_its_own_buffer(pair, step):
    tensor = pattern(4096, step).copy()
    buffer = pair.worker.register(tensor)
    assert same(pair.worker.read(buffer, timeout=WAIT), tensor)
    pair.worker.write(buffer, pattern(10, 5), offset=10, timeout=WAIT)
    assert same(tensor[10:20], pattern(10, 5))
    pair.worker.unregister(buffer)
    with pytest.raises(tv.NotFoundError):
        pair.worker.read(buffer, timeout=WAIT)


def test_the_owner_may_be_either_side(pair, step):
    """The worker (the test's process) registers; the ps reads it and writes it."""
    tensor = pattern(64 << 10, step).copy()
    buffer = pair.worker.register(tensor)
    assert pair.ps.run("remote_buffers:read_matches", buffer, 64 << 10, step)
    pair.ps.write(buffer, pattern(4096, step + 1), offset=8192, timeout=WAIT)
    assert same(tensor[8192:8192 + 4096], pattern(4096, step + 1))
    pair.worker.unregister(buffer)
    assert pair.ps.run("remote_buffers:read_error", buffer)[0] == "NotFoundError"


def test_threads_reading_one_owner_at_once_each_get_their_bytes(pair, step):
    buffers = [register(pair, 8192 * (i + 1), step + i) for i in range(4)]
    failures: list[str] = []

    def reader(i: int) -> None:
        for _ in range(20):
            if not same(pair.worker.read(buffers[i], timeout=WAIT), pattern(8192 * (i + 1), step + i)):
                failures.append(f"reader {i}")
    threads = [threading.Thread(target=reader, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    for buffer in buffers:
        pair.ps.unregister(buffer)


def test_registering_refuses_what_it_cannot_open(pair):
    worker = pair.worker
    with pytest.raises(tv.InvalidArgumentError, match="C-contiguous"):
        worker.register(np.zeros((8, 8))[:, ::2])
    with pytest.raises(tv.InvalidArgumentError, match="writable"):
        worker.register(_read_only(64))
    with pytest.raises(tv.InvalidArgumentError):
        worker.register(np.array([b"strings"], dtype=object))
    with pytest.raises(tv.FailedPreconditionError, match="empty"):
        worker.register(np.zeros(0))


@pytest.mark.parametrize("nbytes", SIZES)
def test_a_device_tensor_is_read_into_and_written_from_through_a_host_proxy(pair, step, nbytes):
    """A tensor on a device the provider cannot reach (the ``cpu:proxy`` stand-in here, a
    GPU without GPUDirect alike) is read into through a host landing, and written from
    through a host copy: the owner's buffer stays in host memory."""
    buffer = register(pair, nbytes, step)
    out = STAND_IN.from_host(np.zeros(nbytes, np.uint8))
    assert pair.worker.read(buffer, out, timeout=WAIT) is out
    assert isinstance(out, StandInArray) and same(out.view(np.ndarray), pattern(nbytes, step))
    part = STAND_IN.from_host(np.zeros(nbytes // 2, np.uint8))
    first, second = pair.worker.read_many([(buffer, part, 0, nbytes // 2), (buffer, None, nbytes // 2)],
                                          timeout=WAIT)
    assert first is part and same(part.view(np.ndarray), pattern(nbytes, step)[:nbytes // 2])
    assert same(second, pattern(nbytes, step)[nbytes // 2:])
    pair.worker.write(buffer, STAND_IN.from_host(pattern(nbytes // 2, step + 1)), offset=nbytes // 4,
                      timeout=WAIT)
    assert pair.ps.run("remote_buffers:holds", buffer, nbytes // 4, nbytes // 2, step + 1)
    pair.ps.unregister(buffer)


def test_a_batch_into_device_tensors_is_staged_in_turns(pair, step, monkeypatch):
    """A read_many into device outs holds at most STAGING_BYTES of host landings at once:
    beyond, it reads and copies to the devices in turns; every out gets its bytes."""
    monkeypatch.setattr(one_sided, "STAGING_BYTES", 3 * 4096)
    buffers = [register(pair, 4096, step + i) for i in range(8)]
    outs = [STAND_IN.from_host(np.zeros(4096, np.uint8)) for _ in buffers]
    host = np.zeros(4096, np.uint8)
    got = pair.worker.read_many([(b, o) for b, o in zip(buffers, outs)] + [(buffers[0], host)],
                                timeout=WAIT)
    assert all(g is o for g, o in zip(got, outs)) and got[-1] is host
    assert all(same(o.view(np.ndarray), pattern(4096, step + i)) for i, o in enumerate(outs))
    assert same(host, pattern(4096, step))
    for buffer in buffers:
        pair.ps.unregister(buffer)


def test_a_device_tensor_cannot_be_registered(pair):
    """Registering needs memory the provider reaches (no GPUDirect here): a device tensor
    is refused, naming its device and what to do instead."""
    with pytest.raises(tv.InvalidArgumentError, match="cpu:proxy.*host"):
        pair.worker.register(STAND_IN.from_host(np.zeros(64, np.uint8)))
    with pytest.raises(tv.InvalidArgumentError, match="C-contiguous"):
        pair.worker.read(register(pair, 64, 1), STAND_IN.from_host(np.zeros((8, 16), np.uint8))[:, ::2],
                         timeout=WAIT)


def test_memory_freed_by_the_garbage_collector_amid_allocations_deadlocks_nothing(pair):
    """Arrays of one-sided memory that die in reference cycles are freed by the garbage
    collector, which runs at any allocation, the allocator's own locked sections included
    (it hung there once)."""
    done = threading.Event()

    def churn() -> None:
        live = [pair.worker.allocate(4096, np.uint8, one_sided=True) for _ in range(50)]
        for i in range(300):
            cycle: list = [pair.worker.allocate(4096, np.uint8, one_sided=True)]
            cycle.append(cycle)  # dies only in a collection
            pair.worker.unregister(pair.worker.register(live[i % 50]))  # looks its region up
        done.set()

    threshold = gc.get_threshold()
    gc.set_threshold(1)  # a collection at nearly every allocation
    try:
        worker = threading.Thread(target=churn, daemon=True)
        worker.start()
        assert done.wait(WAIT), "allocating one-sided memory hung"
    finally:
        gc.set_threshold(*threshold)
