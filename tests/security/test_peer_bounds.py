"""What a client that reaches a task can make it hold, asked as an attacker would, with raw
gRPC calls: a task name past the bound is refused before anything keeps it, and health
watches are capped per connection."""
from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

import tensorverbs as tv
from tensorverbs.cluster import _parse_task
from tensorverbs.local_cluster import cluster_spec
from tensorverbs.rpc import tensorverbs_pb2 as pb
from tensorverbs.rpc.options import SERVICE, method

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
