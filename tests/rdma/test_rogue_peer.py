"""A real grpc+verbs server facing a hand-written peer that sends it malformed, mutated
or lying messages: every bad message is rejected (an ERROR_STATUS for the request it
names, or the channel dropped), the server never crashes or hangs, and lies about the
data become DataLossError on the receiving side."""
from __future__ import annotations

import grpc
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorverbs as tv
from tensorverbs.cluster import parse_task
from tensorverbs.local_cluster import TaskProcess, cluster_spec, pattern, same
from tensorverbs import _core
from tensorverbs.tensor import TensorMeta
from tensorverbs.verbs.config import RdmaConfig

from rogue import SLOT, Message, MessageType, RoguePeer

ENV = {"TENSORVERBS_PROVIDER": "soft"}
PS, W0, W1 = "/job:ps/replica:0/task:0", "/job:worker/replica:0/task:0", "/job:worker/replica:0/task:1"


@pytest.fixture(scope="module")
def rogue_cluster():
    """ps: a real server (child process); worker 0: the rogue; worker 1: a real server."""
    cluster = cluster_spec({"ps": 1, "worker": 2})
    ps = TaskProcess(cluster, "ps", 0, "grpc+verbs", ENV)
    rogue = RoguePeer(parse_task(W0), cluster["worker"][0])
    worker = tv.Server(cluster, "worker", 1, "grpc+verbs", config=RdmaConfig.from_env(ENV))
    rogue.connect_to(cluster["ps"][0])
    yield cluster, ps, rogue, worker
    worker.stop()
    rogue.close()
    ps.stop()


def _request(index: int) -> bytes:
    return Message(MessageType.TENSOR_REQUEST, index, "fuzzed", 7, meta=TensorMeta(1, (4,), False, 16)).encode()


@settings(max_examples=40)
@given(st.one_of(
    st.binary(min_size=1, max_size=SLOT),
    st.tuples(st.integers(0, 10_000), st.lists(st.tuples(st.integers(0, _core.HEADER_BYTES - 1), st.integers(0, 255)),
                                               min_size=1, max_size=4)),
))
def test_bad_messages_are_rejected(rogue_cluster, case):
    cluster, ps, rogue, worker = rogue_cluster
    if isinstance(case, bytes):
        data = case
    else:
        index, flips = case
        raw = bytearray(_request(index))
        for pos, value in flips:
            raw[pos] = value
        data = bytes(raw)
    expected = _core.decode_message(data)
    if expected["error"] is None:
        return  # still a well-formed request: nothing to reject
    if not rogue.write_raw(data):
        rogue.connect_to(cluster["ps"][0])
        return
    if expected["type"] in (MessageType.TENSOR_REQUEST, MessageType.TENSOR_RE_REQUEST,
                            MessageType.CANCEL, MessageType.RELEASE):
        answer = rogue.receive()
        assert answer.type == MessageType.ERROR_STATUS
        assert answer.request_index == expected["request_index"]
        assert answer.error_code == tv.Code.INTERNAL
    else:
        assert rogue.broken(), "an unattributable bad message must drop the channel"
        rogue.connect_to(cluster["ps"][0])


def test_server_survives_the_fuzzing(rogue_cluster, step):
    cluster, ps, rogue, worker = rogue_cluster
    ps.send("after", np.arange(10.0), to=W1, step_id=step)
    assert worker.recv("after", source=PS, step_id=step, timeout=30).tolist() == list(np.arange(10.0))


@pytest.fixture
def lying_sender(step):
    """A real worker (validating data) receiving from a rogue ps."""
    cluster = cluster_spec({"ps": 1, "worker": 1})
    rogue = RoguePeer(parse_task(PS), cluster["ps"][0])
    env = dict(ENV, RDMA_VERBS_VALIDATE="1")
    worker = tv.Server(cluster, "worker", 0, "grpc+verbs", config=RdmaConfig.from_env(env))
    yield rogue, worker
    worker.stop()
    rogue.close()


def _serve(rogue: RoguePeer, payload: bytes, claimed: TensorMeta, checksum: int, written: int):
    """Answer a recv of "t" with META_DATA_RESPONSE, then write ``written`` bytes."""
    request = rogue.receive()
    assert request.type == MessageType.TENSOR_REQUEST and request.name == "t"
    rogue.send(Message(MessageType.META_DATA_RESPONSE, request.request_index, "t",
                       request.step_id, remote_addr=checksum, meta=claimed))
    re_request = rogue.receive()
    assert re_request.type == MessageType.TENSOR_RE_REQUEST
    rogue.write_tensor(payload[:written], re_request.remote_addr, re_request.rkey,
                       re_request.request_index)


def test_checksum_mismatch_is_data_loss(lying_sender, step):
    import zlib

    rogue, worker = lying_sender
    payload = np.arange(4, dtype=np.float32).tobytes()
    meta = TensorMeta(1, (4,), False, 16)
    fut = worker.recv_async("t", source=PS, step_id=step, timeout=30)
    _serve(rogue, payload, meta, zlib.crc32(payload) ^ 1, 16)
    with pytest.raises(tv.DataLossError, match="checksum"):
        fut.result(30)
    fut = worker.recv_async("t", source=PS, step_id=step + 1, timeout=30)
    _serve(rogue, payload, meta, zlib.crc32(payload), 16)  # an honest one passes
    assert fut.result(30).tolist() == [0.0, 1.0, 2.0, 3.0]


def test_short_write_is_data_loss(lying_sender, step):
    rogue, worker = lying_sender
    payload = bytes(range(16))
    fut = worker.recv_async("t", source=PS, step_id=step, timeout=30)
    _serve(rogue, payload, TensorMeta(4, (16,), False, 16), 0, 8)
    with pytest.raises(tv.DataLossError, match="8 bytes arrived, 16 expected"):
        fut.result(30)


def test_sender_error_status_is_raised_with_its_code(lying_sender, step):
    rogue, worker = lying_sender
    fut = worker.recv_async("t", source=PS, step_id=step, timeout=30)
    request = rogue.receive()
    rogue.send(Message(MessageType.ERROR_STATUS, request.request_index, "t", request.step_id,
                       error_code=tv.Code.RESOURCE_EXHAUSTED, error_message="out of tensors"))
    with pytest.raises(tv.ResourceExhaustedError, match="out of tensors"):
        fut.result(30)


def test_a_1_tib_tensor_announced_is_refused_before_any_allocation(lying_sender, step):
    import resource

    rogue, worker = lying_sender
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    fut = worker.recv_async("t", source=PS, step_id=step, timeout=30)
    request = rogue.receive()
    assert request.type == MessageType.TENSOR_REQUEST
    tib = 1 << 40
    rogue.send(Message(MessageType.META_DATA_RESPONSE, request.request_index, "t",
                       request.step_id, meta=TensorMeta(4, (tib,), False, tib)))
    with pytest.raises(tv.ResourceExhaustedError, match="pool limit"):
        fut.result(30)
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak
    assert grown_kib < 64 << 10, f"peak RSS grew by {grown_kib} KiB"


@pytest.fixture
def tiny_operations():
    """A real ps (child process) and worker 1; worker 0 a rogue that says it takes
    operations of one byte at most."""
    cluster = cluster_spec({"ps": 1, "worker": 2})
    ps = TaskProcess(cluster, "ps", 0, "grpc+verbs", ENV)
    rogue = RoguePeer(parse_task(W0), cluster["worker"][0])
    rogue.max_message_bytes = 1
    worker = tv.Server(cluster, "worker", 1, "grpc+verbs", config=RdmaConfig.from_env(ENV))
    yield cluster, ps, rogue, worker
    worker.stop()
    rogue.close()
    ps.stop()


def test_a_peer_announcing_one_byte_operations_is_refused_by_name(tiny_operations, step):
    cluster, ps, rogue, worker = tiny_operations
    # the ps sets the channel up, for its recv from the rogue
    with pytest.raises(tv.TensorverbsError, match="max_message_bytes") as refused:
        ps.recv("t", W0, step, 10)
    assert W0 in str(refused.value)
    # the rogue sets it up
    with pytest.raises(grpc.RpcError) as answered:
        rogue.connect_to(cluster["ps"][0])
    assert "max_message_bytes" in answered.value.details() and W0 in answered.value.details()
    # the ps lives on, and so does its channel to worker 1
    ps.send_pattern("after", W1, step, 1 << 20, 3)
    assert same(worker.recv("after", source=PS, step_id=step, timeout=30), pattern(1 << 20, 3))


@pytest.fixture(params=["auto", "no"], ids=["shm", "tcp"])
def two_rogues(request, step):
    """A real worker 0 (in this process) and two rogues: the ps and worker 1, each with a
    channel to it (over shared memory, or TCP only)."""
    cluster = cluster_spec({"ps": 1, "worker": 2})
    env = dict(ENV, TENSORVERBS_SAME_HOST=request.param)
    worker = tv.Server(cluster, "worker", 0, "grpc+verbs", config=RdmaConfig.from_env(env))
    ps, other = RoguePeer(parse_task(PS), cluster["ps"][0]), RoguePeer(parse_task(W1), cluster["worker"][1])
    ps.connect_to(cluster["worker"][0])
    other.connect_to(cluster["worker"][0])
    yield worker, ps, other
    worker.stop()
    ps.close()
    other.close()


def test_a_landing_given_to_one_peer_is_refused_to_another(two_rogues, step):
    worker, ps, other = two_rogues
    payload = np.arange(1 << 14, dtype=np.float32)  # too large to come inline: it lands
    fut = worker.recv_async("t", source=PS, step_id=step, timeout=30)
    request = ps.receive()
    ps.send(Message(MessageType.META_DATA_RESPONSE, request.request_index, "t", request.step_id,
                    meta=TensorMeta(1, payload.shape, False, payload.nbytes)))
    landing = ps.receive()
    assert landing.type == MessageType.TENSOR_RE_REQUEST and landing.rkey
    # worker 1 learns where the ps may write (rkeys travel in the clear) and tries first
    written = other.write_plain(bytes(payload.nbytes), landing.remote_addr, landing.rkey)
    assert written.status_name == "REM_ACCESS_ERR"
    ps.write_tensor(payload.tobytes(), landing.remote_addr, landing.rkey, landing.request_index)
    assert same(fut.result(30), payload)


@pytest.mark.parametrize("answer", [MessageType.META_DATA_RESPONSE, MessageType.TENSOR_INLINE])
def test_a_shape_no_array_can_take_fails_the_recv(lying_sender, step, answer):
    """An empty tensor whose other dims pass what numpy can make an array of (2^63 - 1 bytes,
    a zero dim notwithstanding) fails its recv naming the shape; the next recv is served."""
    rogue, worker = lying_sender
    fut = worker.recv_async("t", source=PS, step_id=step, timeout=30)
    request = rogue.receive()
    rogue.send(Message(answer, request.request_index, "t", request.step_id,
                       meta=TensorMeta(1, (0, 1 << 62, 1 << 62), False, 0)))
    with pytest.raises(tv.TensorverbsError, match="larger than any array"):
        fut.result(30)
    payload = np.arange(4, dtype=np.float32)
    fut = worker.recv_async("t", source=PS, step_id=step + 1, timeout=30)
    request = rogue.receive()
    rogue.send(Message(MessageType.TENSOR_INLINE, request.request_index, "t", request.step_id,
                       meta=TensorMeta(1, (4,), False, 16), payload=payload.tobytes()))
    assert same(fut.result(30), payload)
