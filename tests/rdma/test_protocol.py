"""The grpc+verbs protocol's own promises: message counts, zero copies, no leaks, scale,
and failure of every pending recv when the peer dies mid-transfer."""
from __future__ import annotations

import numpy as np
import pytest

import tensorverbs as tv
from tensorverbs.local_cluster import pattern, same

from variants import VARIANTS, start_pair

VERBS = [v for v, (protocol, _) in VARIANTS.items() if protocol == "grpc+verbs"]
WRITE_MODE = [v for v in VERBS if "read" not in v]


@pytest.fixture(scope="module", params=VERBS)
def vpair(request):
    protocol, env = VARIANTS[request.param]
    p = start_pair(protocol, env)
    p.variant = request.param
    yield p
    p.worker.stop()
    p.ps.stop()


def delta(before: dict, after: dict, *names: str) -> dict:
    return {n: after[n] - before[n] for n in names}


MESSAGES = ("tensor_requests", "meta_data_responses", "tensor_re_requests", "inline_tensors")


def exchange(p, name: str, array: np.ndarray, step: int) -> dict:
    """ps sends, worker receives; the worker's message counters of this transfer."""
    before = p.worker.stats()
    p.ps.send(name, array, to=p.WORKER, step_id=step)
    assert same(p.worker.recv(name, source=p.PS, step_id=step, timeout=30), array)
    return delta(before, p.worker.stats(), *MESSAGES)


@pytest.mark.parametrize("vpair", WRITE_MODE, indirect=True)
def test_meta_data_round_only_when_meta_data_changes(vpair, step):
    a = np.arange(4000, dtype=np.float32)  # too large to travel inline
    first = {"tensor_requests": 1, "meta_data_responses": 1, "tensor_re_requests": 1, "inline_tensors": 0}
    cached = {"tensor_requests": 1, "meta_data_responses": 0, "tensor_re_requests": 0, "inline_tensors": 0}
    assert exchange(vpair, "m", a, step) == first
    assert exchange(vpair, "m", a + 1, step + 1) == cached
    assert exchange(vpair, "m", a + 2, step + 2) == cached
    assert exchange(vpair, "m", a.reshape(40, 100), step + 3) == first      # new shape
    assert exchange(vpair, "m", a.reshape(40, 100).astype(np.int32), step + 4) == first  # new dtype
    assert exchange(vpair, "m", a.reshape(40, 100).astype(np.int32), step + 5) == cached


@pytest.mark.parametrize("vpair", WRITE_MODE, indirect=True)
def test_small_tensors_travel_inline_in_one_round_trip(vpair, step):
    """Eager: a tensor that fits a message slot comes back in the answer to its request,
    first time or not, whatever its meta-data."""
    inline = {"tensor_requests": 1, "meta_data_responses": 0, "tensor_re_requests": 0, "inline_tensors": 1}
    for s, array in enumerate([np.arange(1000, dtype=np.float32), np.arange(7, dtype=np.int8),
                               np.zeros((0, 3)), np.float64(2.5)]):
        assert exchange(vpair, "s", np.asarray(array), step + s) == inline


@pytest.mark.parametrize("vpair", [v for v in VERBS if v not in WRITE_MODE], indirect=True)
def test_read_mode_counts(vpair, step):
    before = vpair.worker.stats()
    exchange(vpair, "r", np.ones(4096, np.float64), step)
    d = delta(before, vpair.worker.stats(), "tensor_requests", "meta_data_responses", "releases",
              "rdma_reads", "tensor_re_requests")
    assert d == {"tensor_requests": 1, "meta_data_responses": 1, "releases": 1, "rdma_reads": 1,
                 "tensor_re_requests": 0}


def test_64mib_same_host_without_copies(vpair, step):
    nbytes = 64 << 20
    before_w, before_p = vpair.worker.stats(), vpair.ps.stats()
    for s in (step, step + 1):
        vpair.ps.send_pattern("big", vpair.WORKER, s, nbytes, seed=s, dtype="float32")
        out = vpair.worker.recv("big", source=vpair.PS, step_id=s, timeout=60)
        assert out.dtype == np.float32 and same(out, pattern(nbytes, s, "float32"))
        del out
    after_w, after_p = vpair.worker.stats(), vpair.ps.stats()
    assert after_p["staging_copies"] == before_p["staging_copies"]
    assert after_w["proxy_copies"] == before_w["proxy_copies"]
    assert after_p["proxy_copies"] == before_p["proxy_copies"]
    assert after_w["bytes_received"] - before_w["bytes_received"] == 2 * nbytes


def test_result_is_registered_memory_returned_on_drop(vpair, step):
    start = vpair.worker.stats()["pool_in_use_bytes"]
    vpair.ps.send_pattern("held", vpair.WORKER, step, 1 << 20, seed=1)
    held = vpair.worker.recv("held", source=vpair.PS, step_id=step, timeout=30)
    view = held[10:20]
    del held
    assert vpair.worker.stats()["pool_in_use_bytes"] >= start + (1 << 20)
    del view
    assert vpair.worker.stats()["pool_in_use_bytes"] == start


def test_thousand_steps_return_the_pool(vpair, step):
    first = step * 100
    start = vpair.worker.stats()["pool_in_use_bytes"]
    vpair.ps.send_steps("s", vpair.WORKER, first, 1000, 4096)
    for s in range(first, first + 1000):
        out = vpair.worker.recv("s", source=vpair.PS, step_id=s, timeout=30)
        assert out.nbytes == 4096
    del out
    assert vpair.worker.stats()["pool_in_use_bytes"] == start


def test_thousand_concurrent_recvs_on_one_channel(vpair, step):
    futures = [vpair.worker.recv_async(f"k{i}", source=vpair.PS, step_id=step, timeout=120)
               for i in range(1000)]
    vpair.ps.call("wait_waiters", 1000, timeout=120)
    for i in range(1000):
        vpair.ps.send(f"k{i}", np.full(7, i, np.int32), to=vpair.WORKER, step_id=step)
    for i, fut in enumerate(futures):
        assert fut.result(120).tolist() == [i] * 7


@pytest.mark.parametrize("variant", VERBS)
def test_peer_killed_mid_transfer(variant):
    protocol, env = VARIANTS[variant]
    p = start_pair(protocol, env)
    try:
        p.ps.send("warm", np.ones(4), to=p.WORKER, step_id=1)
        p.worker.recv("warm", source=p.PS, step_id=1, timeout=30)
        big = [p.worker.recv_async(f"big{i}", source=p.PS, step_id=2) for i in range(4)]
        never = [p.worker.recv_async(f"never{i}", source=p.PS, step_id=2) for i in range(4)]
        p.ps.call("wait_waiters", 8)
        for i in range(4):
            p.ps.post("send_pattern", f"big{i}", p.WORKER, 2, 32 << 20, i)
        p.ps.kill()
        for fut in big:  # each either arrived whole or failed
            try:
                out = fut.result(timeout=10)
            except tv.UnavailableError:
                continue
            assert out.nbytes == 32 << 20
        for fut in never:
            with pytest.raises(tv.UnavailableError, match="/job:ps"):
                fut.result(timeout=10)
    finally:
        p.worker.stop()
        p.ps.stop()


def test_one_message_slot_as_in_the_seeds(step):
    """TENSORVERBS_MESSAGE_SLOTS=1: one control message in flight per direction, the rest
    queued behind the ACKs; many concurrent recvs still complete."""
    p = start_pair("grpc+verbs", {"TENSORVERBS_PROVIDER": "soft", "TENSORVERBS_MESSAGE_SLOTS": "1"})
    try:
        futures = [p.worker.recv_async(f"q{i}", source=p.PS, step_id=step, timeout=120) for i in range(200)]
        for i in range(200):
            p.ps.send(f"q{i}", np.full(3, i, np.int16), to=p.WORKER, step_id=step)
        assert [f.result(120).tolist() for f in futures] == [[i] * 3 for i in range(200)]
    finally:
        p.worker.stop()
        p.ps.stop()


def test_allocated_arrays_are_sent_without_registration_or_copy(vpair, step):
    array = vpair.worker.allocate((1 << 18,), np.float32)  # 1 MiB in registered memory
    array[:] = np.arange(array.size, dtype=np.float32)
    before = vpair.worker.stats()
    vpair.worker.send("pooled", array, to=vpair.PS, step_id=step)
    out = vpair.ps.recv("pooled", vpair.WORKER, step, timeout=30)
    assert same(out, array)
    after = vpair.worker.stats()
    for name in ("source_registrations", "staging_copies"):
        assert after[name] == before[name], name


@pytest.mark.parametrize("nbytes", [1 << 10, 64 << 10, 4 << 20], ids=["1KiB", "64KiB", "4MiB"])
def test_arrays_allocated_in_registered_memory_are_received_into_as_they_are(vpair, step, nbytes):
    """out= in server.allocate() memory: the tensor lands there at any size, without a
    registration (the peer reaches the pool already)."""
    out = vpair.worker.allocate((nbytes // 4,), np.float32)
    before = vpair.worker.stats()["landing_registrations"]
    vpair.ps.send_pattern("into-pool", vpair.WORKER, step, nbytes, 3, "float32")
    assert vpair.worker.recv("into-pool", vpair.PS, step, timeout=30, out=out) is out
    assert same(out, pattern(nbytes, 3, "float32"))
    assert vpair.worker.stats()["landing_registrations"] == before


def test_pool_limit_errors_reach_the_caller_and_lose_nothing(step):
    """A pool too small for a tensor: on the receiver the recv fails with
    ResourceExhaustedError; on the sender (a tensor it must stage into a pool that is full)
    the error crosses to the receiver, and the tensor stays in the sender's table."""
    env = {"TENSORVERBS_PROVIDER": "soft", "TENSORVERBS_POOL_BLOCK": "1MiB", "TENSORVERBS_POOL_LIMIT": "2MiB"}
    p = start_pair("grpc+verbs", env)
    try:
        p.ps.send_pattern("big", p.WORKER, step, 4 << 20, seed=1)  # lands in the worker's pool
        with pytest.raises(tv.ResourceExhaustedError, match="TENSORVERBS_POOL_LIMIT"):
            p.worker.recv("big", source=p.PS, step_id=step, timeout=30)
        p.ps.call("run", "pool_hog:hold", 2 << 20)  # the ps's pool is full
        p.ps.send_pattern("staged", p.WORKER, step, 32 << 10, seed=2)  # staged: too small to register
        with pytest.raises(tv.ResourceExhaustedError, match="/job:ps"):
            p.worker.recv("staged", source=p.PS, step_id=step, timeout=30)
        assert p.ps.pending()[0] >= 1  # "staged" went back to the ps's table
        p.ps.call("run", "pool_hog:release")
        assert same(p.worker.recv("staged", source=p.PS, step_id=step, timeout=30), pattern(32 << 10, 2))
    finally:
        p.worker.stop()
        p.ps.stop()


@pytest.mark.parametrize("mode", ["write", "read"])
def test_validation_mode_passes_honest_data(mode, step):
    env = {"TENSORVERBS_PROVIDER": "soft", "RDMA_VERBS_VALIDATE": "1", "TENSORVERBS_RENDEZVOUS": mode}
    p = start_pair("grpc+verbs", env)
    try:
        for s, nbytes in enumerate([0, 4096, 3 << 20]):
            p.ps.send_pattern("v", p.WORKER, step + s, nbytes, seed=s)
            assert same(p.worker.recv("v", source=p.PS, step_id=step + s, timeout=30), pattern(nbytes, s))
    finally:
        p.worker.stop()
        p.ps.stop()
