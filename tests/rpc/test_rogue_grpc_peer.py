"""A "grpc" task facing a hand-written peer whose RecvTensor answers lie: the recv fails
with an error, never hangs, allocates nothing for a tensor it does not accept, and opens
no tensor passed by handle from a peer not on this host."""
from __future__ import annotations

import resource
import secrets
from concurrent import futures

import grpc
import numpy as np
import pytest

import tensorverbs as tv
from tensorverbs.ipc.descriptor import STAND_IN as STAND_IN_KIND, SharedTensorDescriptor
from tensorverbs.ipc.host_registry import private_directory
from tensorverbs.local_cluster import cluster_spec
from tensorverbs.rpc import tensor_pb2
from tensorverbs.rpc import tensorverbs_pb2 as pb
from tensorverbs.rpc.options import SERVER_OPTIONS, SERVICE
from tensorverbs.tensor import DT_STRING, DT_VARIANT
from tensorverbs.verbs.config import RdmaConfig

PS = "/job:ps/replica:0/task:0"
DT_FLOAT = 1


@pytest.fixture
def rogue_ps():
    """(the cluster, a function setting what its rogue ps answers RecvTensor with)."""
    spec = cluster_spec({"ps": 1, "worker": 1})
    answer = {}

    def recv_tensor(requests, context):
        next(requests)
        yield from answer["messages"]
        for _ in requests:  # (the receiver's confirmation)
            pass

    server = grpc.server(futures.ThreadPoolExecutor(4), options=SERVER_OPTIONS)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {
        "GetStatus": grpc.unary_unary_rpc_method_handler(
            lambda r, c: pb.GetStatusResponse(task=PS, incarnation=7, protocol="grpc"),
            request_deserializer=pb.GetStatusRequest.FromString,
            response_serializer=pb.GetStatusResponse.SerializeToString),
        "RecvTensor": grpc.stream_stream_rpc_method_handler(
            recv_tensor, request_deserializer=pb.RecvTensorRequest.FromString,
            response_serializer=lambda b: b),
    }),))
    server.add_insecure_port(spec["ps"][0])
    server.start()
    yield spec, lambda messages: answer.update(messages=messages)
    server.stop(0)


def _meta(shape: tuple[int, ...], nbytes: int, dtype: int = DT_FLOAT) -> bytes:
    dims = [tensor_pb2.TensorShapeProto.Dim(size=d) for d in shape]
    return pb.RecvTensorResponse(meta=pb.TensorMeta(
        dtype=dtype, shape=tensor_pb2.TensorShapeProto(dim=dims), tensor_bytes=nbytes)).SerializeToString()


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10


@pytest.mark.parametrize("nbytes", [1 << 40, 4 << 40])
def test_a_huge_tensor_announced_fails_the_recv_before_any_allocation(rogue_ps, nbytes):
    spec, answer = rogue_ps
    answer([_meta((nbytes // 4,), nbytes)])
    with tv.Server(spec, "worker", 0) as worker:
        before = _peak_rss()
        fut = worker.recv_async("huge", source=PS)
        with pytest.raises(tv.ResourceExhaustedError, match="TENSORVERBS_MAX_TENSOR_BYTES"):
            fut.result(timeout=30)
        assert _peak_rss() - before < 64 << 20


def test_the_largest_tensor_accepted_is_configured(rogue_ps):
    spec, answer = rogue_ps
    answer([_meta((1 << 19,), 2 << 20)])
    config = RdmaConfig.from_env({"TENSORVERBS_MAX_TENSOR_BYTES": "1MiB"})
    with tv.Server(spec, "worker", 0, config=config) as worker:
        with pytest.raises(tv.ResourceExhaustedError, match=f"{2 << 20} bytes, more than the {1 << 20}"):
            worker.recv("big", source=PS, timeout=30)


def test_strings_announced_as_raw_bytes_are_malformed(rogue_ps):
    spec, answer = rogue_ps
    answer([_meta((1 << 40,), 0, DT_STRING)])
    with tv.Server(spec, "worker", 0) as worker:
        with pytest.raises(tv.InternalError, match="non-DMAable"):
            worker.recv("strings", source=PS, timeout=30)


def _string_tensor(shape: tuple[int, ...], strings: list[bytes]) -> bytes:
    """A RecvTensor response carrying a string tensor (a TensorProto) of ``shape``, inline."""
    proto = tensor_pb2.TensorProto(dtype=DT_STRING, string_val=strings)
    proto.tensor_shape.dim.extend(tensor_pb2.TensorShapeProto.Dim(size=d) for d in shape)
    data = proto.SerializeToString()
    return pb.RecvTensorResponse(meta=pb.TensorMeta(
        dtype=DT_STRING, shape=proto.tensor_shape, tensor_bytes=len(data), is_proto=True),
        chunk=data).SerializeToString()


@pytest.mark.parametrize("answer_with", [
    pytest.param(lambda: _meta((0, 1 << 62, 1 << 62), 0), id="empty-but-larger-than-any-array"),
    pytest.param(lambda: _string_tensor((-1, -1), [b"x"]), id="strings-of-negative-dims"),
    pytest.param(lambda: _string_tensor((0, 1 << 62, 1 << 62), []), id="strings-larger-than-any-array"),
])
def test_a_shape_no_array_can_take_fails_the_recv(rogue_ps, answer_with):
    """A shape numpy cannot make an array of (it refuses one past 2^63 - 1 bytes even with a
    zero dim) fails the recv with a TensorverbsError naming the shape, blocking or not."""
    spec, answer = rogue_ps
    answer([answer_with()])
    with tv.Server(spec, "worker", 0) as worker:
        with pytest.raises(tv.TensorverbsError, match="shape|larger than any array"):
            worker.recv("crafted", source=PS, timeout=30)
        fut = worker.recv_async("crafted", source=PS, step_id=1)
        with pytest.raises(tv.TensorverbsError, match="shape|larger than any array"):
            fut.result(timeout=30)


def test_a_tensor_passed_by_handle_from_a_task_not_on_this_host_is_refused_unopened(rogue_ps):
    """A descriptor of a tensor passed by handle names memory of this host: it is opened
    only for a sender on this host (in the host's registry), never for any other peer,
    which could otherwise make the receiver read a file of the host that it names."""
    spec, answer = rogue_ps
    with tv.Server(spec, "worker", 0, device_ipc=True) as worker:
        registry = private_directory()
        secret = np.arange(16, dtype=np.float32)
        name = f"tensor-{secrets.token_hex(16)}"
        (registry / name).write_bytes(secret.tobytes())
        try:
            payload = SharedTensorDescriptor(STAND_IN_KIND, 1, (16,), 7, 1, "cpu:proxy",
                                             (name.encode(),)).encode().tobytes()
            answer([pb.RecvTensorResponse(meta=pb.TensorMeta(
                dtype=DT_VARIANT, shape=tensor_pb2.TensorShapeProto(
                    dim=[tensor_pb2.TensorShapeProto.Dim(size=len(payload))]),
                tensor_bytes=len(payload)), chunk=payload).SerializeToString()])
            with pytest.raises(tv.PermissionDeniedError, match=f"{PS} is not a task of this host"):
                worker.recv("by-handle", source=PS, timeout=30, device="cpu:proxy")
        finally:
            (registry / name).unlink()
