"""A Ray tensor transport with a job token: its actors' servers move tensors between
themselves and refuse a caller without the token."""
from __future__ import annotations

import grpc
import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="the Ray integration needs ray (pip install 'tensorverbs[ray]')")
torch = pytest.importorskip("torch", reason="the Ray integration moves torch tensors")

import tensorverbs as tv  # noqa: E402
from tensorverbs.local_cluster import pattern  # noqa: E402
from tensorverbs.ray import register_transport  # noqa: E402
from tensorverbs.rpc import tensorverbs_pb2 as pb  # noqa: E402
from tensorverbs.rpc.auth import JobToken  # noqa: E402
from tensorverbs.rpc.options import method  # noqa: E402

NAME, TOKEN = "TENSORVERBS_WITH_TOKEN", "ray-job-token-31c7"


@ray.remote(enable_tensor_transport=True)
class Holder:
    def make(self, seed: int) -> list:
        return [torch.from_numpy(pattern(4096, seed))]

    def check(self, tensors: list, seed: int) -> bool:
        return np.array_equal(tensors[0].numpy(), pattern(4096, seed))

    def endpoint(self) -> tuple[str, str]:
        from ray.experimental.rdt.util import get_tensor_transport_manager

        return get_tensor_transport_manager(NAME).server.endpoint()


def test_a_transport_s_token_guards_its_actors_servers(ray_cluster):
    assert register_transport(NAME, "grpc", token=TOKEN) == NAME
    source, destination = Holder.remote(), Holder.remote()
    assert ray.get(destination.check.remote(source.make.options(tensor_transport=NAME).remote(1), 1), timeout=240)
    _, address = ray.get(source.endpoint.remote())
    with grpc.insecure_channel(address) as channel:
        status = channel.unary_unary(method("GetStatus"), request_serializer=pb.GetStatusRequest.SerializeToString,
                                     response_deserializer=pb.GetStatusResponse.FromString)
        with pytest.raises(grpc.RpcError) as refused:
            status(pb.GetStatusRequest(), timeout=30)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        answer = status(pb.GetStatusRequest(), timeout=30, metadata=JobToken(TOKEN).metadata("an actor's task"))
        assert answer.task
    # registered again with another token: refused, without showing either
    with pytest.raises(tv.InvalidArgumentError, match="another token") as info:
        register_transport(NAME, "grpc", token="another")
    assert TOKEN not in info.value.message and "another'" not in info.value.message
