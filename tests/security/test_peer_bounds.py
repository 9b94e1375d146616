"""What a client that reaches a task can make it hold, asked as an attacker would, with raw
gRPC calls: a task name past the bound is refused before anything keeps it, health
watches are capped per connection, one-sided access is served to a bounded number of callers, and set-ups
that hang hold up only the task they claim to come from."""
from __future__ import annotations

import time

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

import tensorverbs as tv
from black_hole import aimed_at, black_hole, dialing  # noqa: F401 (black_hole: a fixture)
from tensorverbs.cluster import _parse_task
from tensorverbs.local_cluster import cluster_spec
from tensorverbs.one_sided import registrations
from tensorverbs.one_sided.context import VerbsContext
from tensorverbs.rpc import service, tensorverbs_pb2 as pb
from tensorverbs.rpc.options import SERVICE, method
from tensorverbs.verbs.config import RdmaConfig

WORKER = "/job:worker/replica:0/task:0"
#: a task name of 64 KiB (gRPC takes messages of up to 4 MiB)
LONG = "/job:" + "a" * (64 << 10) + "/task:0"


@pytest.fixture
def worker():
    spec = cluster_spec({"worker": 1})
    with tv.Server(spec, "worker", 0, "grpc") as server, grpc.insecure_channel(spec["worker"][0]) as channel:
        yield server, channel


def test_a_task_name_past_the_bound_is_refused_unkept():
    with pytest.raises(tv.InvalidArgumentError, match="longer than 1024") as info:
        tv.parse_task(LONG)
    assert len(info.value.message) < 2048  # the name is not repeated whole
    assert tv.parse_task("/job:" + "a" * 1000 + "/task:0").job == "a" * 1000


def test_a_recv_tensor_call_naming_a_long_task_is_refused_at_once(worker):
    server, channel = worker
    tv.parse_task(f"{server.task}/device:CPU:0")  # the key's source, kept as any task's name
    kept = _parse_task.cache_info().currsize
    key = f"{server.task}/device:CPU:0;{server.incarnation:016x};{LONG}/device:CPU:0;t;0:0"
    call = channel.stream_stream(method("RecvTensor"), request_serializer=pb.RecvTensorRequest.SerializeToString)
    with pytest.raises(grpc.RpcError) as refused:
        list(call(iter([pb.RecvTensorRequest(step_id=1, request_id=1, rendezvous_key=key)]), timeout=30))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value.details()
    assert "longer than 1024" in refused.value.details() and len(refused.value.details()) < 4096
    assert _parse_task.cache_info().currsize == kept


def test_health_watches_are_capped_per_connection(worker):
    _, channel = worker
    health = health_pb2_grpc.HealthStub(channel)
    watches, refused = [], None
    for _ in range(1000):
        watch = health.Watch(health_pb2.HealthCheckRequest(service=SERVICE))
        try:
            assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
        except grpc.RpcError as exc:
            refused = exc
            break
        watches.append(watch)
    assert refused is not None, f"{len(watches)} watches served on one connection"
    assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert f"at most {len(watches)} health watches" in refused.details()
    watches.pop().cancel()  # a watch that ends makes room for another
    for _ in range(100):  # (the server learns of the cancel as it comes)
        again = health.Watch(health_pb2.HealthCheckRequest(service=""))
        try:
            assert next(again).status == health_pb2.HealthCheckResponse.SERVING
            break
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    else:
        raise AssertionError("no room for a watch after one ended")
    again.cancel()
    for watch in watches:
        watch.cancel()


@pytest.fixture
def outsiders(worker, monkeypatch):
    """(the worker; GetRemoteAccess on it; request(i, aim): one claiming to be task i of a
    job outside its cluster, its queue pair's endpoint passed through ``aim``), with at most
    4 such callers served."""
    monkeypatch.setattr(registrations, "MAX_OUTSIDERS", 4)
    server, channel = worker
    server.register(np.zeros(1024, np.uint8))
    own = VerbsContext(RdmaConfig(), "127.0.0.1", "127.0.0.1").open()
    call = channel.unary_unary(method("GetRemoteAccess"),
                               request_serializer=pb.GetRemoteAccessRequest.SerializeToString,
                               response_deserializer=pb.GetRemoteAccessResponse.FromString)

    kept = []  # the queue pairs the requests name, alive until the test ends

    def request(i: int, aim=lambda endpoint: endpoint) -> pb.GetRemoteAccessRequest:
        qp, _ = own.queue_pair(4)
        kept.append(qp)
        return pb.GetRemoteAccessRequest(host_name=f"/job:intruder/replica:0/task:{i}", incarnation=1,
                                         provider=own.provider, endpoint=aim(qp.endpoint))

    yield server, call, request


def test_one_sided_access_is_served_to_a_bounded_number_of_tasks_outside_the_cluster(outsiders):
    """The queue pairs a task serves one-sided access through are one per caller: the
    tasks of its cluster, and a bounded number of others (a Ray driver it never learned);
    a caller past the bound is refused before any queue pair is made."""
    server, call, request = outsiders

    def ask(i: int) -> pb.GetRemoteAccessResponse:
        return call(request(i), timeout=30)

    for i in range(4):
        assert ask(i).incarnation == server.incarnation
    for i in range(4, 8):
        with pytest.raises(grpc.RpcError) as refused:
            ask(i)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, refused.value.details()
        assert "4 tasks outside its cluster already" in refused.value.details()
    assert ask(2).incarnation == server.incarnation  # one served already may set up again


def test_one_sided_set_ups_under_way_count_against_the_bound_on_callers_outside_the_cluster(
        outsiders, black_hole):
    """Callers outside the cluster whose set-ups hang (their endpoints dial a black hole)
    count against the bound as they start: one more is refused at once, not given a thread."""
    _, call, request = outsiders

    def hanging_request(i: int) -> pb.GetRemoteAccessRequest:
        return request(i, lambda endpoint: aimed_at(endpoint, black_hole))

    hanging = [call.future(hanging_request(i), timeout=120) for i in range(4)]
    try:
        deadline = time.monotonic() + 60
        while dialing(black_hole) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)  # (nothing tells when the owner dials)
        assert dialing(black_hole) >= 4, "the owner did not dial the addresses given"
        with pytest.raises(grpc.RpcError) as refused:
            call(hanging_request(4), timeout=120)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, refused.value.details()
        assert not any(future.done() for future in hanging)
    finally:
        for future in hanging:
            future.cancel()


def test_set_ups_that_hang_hold_up_only_the_task_they_claim_to_come_from(black_hole):
    """One-sided set-ups whose queue pair must be dialed at an address that never answers
    (each holds the dial for seconds) hold up only the set-ups of the task they claim to
    come from: another task's read is served while they all still wait."""
    spec = cluster_spec({"worker": 3})
    with tv.Server(spec, "worker", 0, "grpc") as owner, tv.Server(spec, "worker", 1, "grpc") as reader, \
            grpc.insecure_channel(spec["worker"][0]) as channel:
        buffer = owner.register(np.arange(4096, dtype=np.uint8))
        own = VerbsContext(RdmaConfig(), "127.0.0.1", "127.0.0.1").open()
        call = channel.unary_unary(method("GetRemoteAccess"),
                                   request_serializer=pb.GetRemoteAccessRequest.SerializeToString,
                                   response_deserializer=pb.GetRemoteAccessResponse.FromString)
        hanging = []
        for _ in range(40):  # more than any default thread pool has threads
            qp, _ = own.queue_pair(4)
            request = pb.GetRemoteAccessRequest(host_name="/job:worker/replica:0/task:2", incarnation=1,
                                                provider=own.provider,
                                                endpoint=aimed_at(qp.endpoint, black_hole))
            hanging.append(call.future(request, timeout=120))
        try:
            deadline = time.monotonic() + 60
            while not dialing(black_hole) and time.monotonic() < deadline:
                time.sleep(0.01)  # (nothing tells when the owner dials)
            assert dialing(black_hole), "the owner never dialed the address given"
            assert np.array_equal(reader.read(buffer, timeout=120), np.arange(4096, dtype=np.uint8))
            waiting = sum(not future.done() for future in hanging)
            assert waiting == len(hanging), f"{len(hanging) - waiting} hanging set-ups ended before the read"
        finally:
            for future in hanging:
                future.cancel()


def test_recv_tensor_calls_waiting_for_one_receiver_are_bounded(worker, monkeypatch):
    """The RecvTensor calls one receiver has waiting at a sender are bounded: one past the
    bound is refused RESOURCE_EXHAUSTED, and one that ends makes room."""
    monkeypatch.setattr(service, "MAX_WAITING_CALLS", 8)
    server, channel = worker
    call = channel.stream_stream(method("RecvTensor"), request_serializer=pb.RecvTensorRequest.SerializeToString)

    def recv_call(i: int):
        key = f"{server.task}/device:CPU:0;{server.incarnation:016x};{server.task}/device:CPU:0;never{i};0:0"
        return call(iter([pb.RecvTensorRequest(step_id=1, request_id=i + 1, rendezvous_key=key)]), timeout=60)

    waiting = [recv_call(i) for i in range(8)]
    deadline = time.monotonic() + 30
    while server.stats()["recv_calls_waiting"] < 8 and time.monotonic() < deadline:
        time.sleep(0.01)  # (nothing tells when the calls reach the server)
    with pytest.raises(grpc.RpcError) as refused:
        list(recv_call(8))
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, refused.value.details()
    assert f"{server.task} has 8 RecvTensor calls waiting" in refused.value.details()
    waiting.pop().cancel()
    for call_ in waiting:
        call_.cancel()


def test_a_recv_tensor_call_made_again_for_too_many_calls_is_refused(worker):
    server, channel = worker
    key = f"{server.task}/device:CPU:0;{server.incarnation:016x};{server.task}/device:CPU:0;t;0:0"
    call = channel.stream_stream(method("RecvTensor"), request_serializer=pb.RecvTensorRequest.SerializeToString)
    request = pb.RecvTensorRequest(step_id=1, request_id=1, rendezvous_key=key,
                                   retry_of=range(2, 3 + service.MAX_RETRY_OF))
    with pytest.raises(grpc.RpcError) as refused:
        list(call(iter([request]), timeout=30))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value.details()
    assert f"at most {service.MAX_RETRY_OF}" in refused.value.details()


def test_a_second_recv_tensor_call_under_a_request_id_in_use_is_refused(worker):
    """Two calls of one receiver under one request id: the second is refused, the first
    waits on (and ends CANCELLED when withdrawn)."""
    server, channel = worker
    key = f"{server.task}/device:CPU:0;{server.incarnation:016x};{server.task}/device:CPU:0;never;0:0"
    call = channel.stream_stream(method("RecvTensor"), request_serializer=pb.RecvTensorRequest.SerializeToString)
    first = call(iter([pb.RecvTensorRequest(step_id=1, request_id=9, rendezvous_key=key)]), timeout=60)
    deadline = time.monotonic() + 30
    while server.stats()["recv_calls_waiting"] < 1:
        assert time.monotonic() < deadline, "the first call never reached the server"
        time.sleep(0.01)  # (nothing tells when the call reaches the server)
    with pytest.raises(grpc.RpcError) as refused:
        list(call(iter([pb.RecvTensorRequest(step_id=1, request_id=9, rendezvous_key=key)]), timeout=30))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value.details()
    assert "RecvTensor call 9" in refused.value.details()
    assert server.stats()["recv_calls_waiting"] == 1
    withdraw = channel.unary_unary(method("CancelRecvTensor"),
                                   request_serializer=pb.CancelRecvTensorRequest.SerializeToString)
    withdraw(pb.CancelRecvTensorRequest(request_id=9), timeout=30)
    with pytest.raises(grpc.RpcError) as cancelled:
        list(first)
    assert cancelled.value.code() == grpc.StatusCode.CANCELLED, cancelled.value.details()


def test_a_settle_call_of_too_many_calls_is_refused(worker):
    _, channel = worker
    settle = channel.unary_unary(method("SettleRecvTensors"),
                                 request_serializer=pb.SettleRecvTensorsRequest.SerializeToString)
    with pytest.raises(grpc.RpcError) as refused:
        settle(pb.SettleRecvTensorsRequest(taken=range(service.MAX_SETTLED), dropped=[1]), timeout=30)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value.details()
    assert f"at most {service.MAX_SETTLED}" in refused.value.details()
