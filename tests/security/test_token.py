"""The job token: a task with another token neither receives from the job nor is served
by it, and a caller without the token is refused by every method of the service while
the health service answers."""
from __future__ import annotations

import grpc
import pytest

import tensorverbs as tv
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tensorverbs.cluster import parse_task
from tensorverbs.local_cluster import cluster_spec, pattern, same
from tensorverbs.rendezvous.key import RendezvousKey, format_key
from tensorverbs.rpc import tensorverbs_pb2 as pb
from tensorverbs.rpc.auth import HEADER, JobToken
from tensorverbs.rpc.options import SERVICE, method

from secured import PS, WORKER, refused, start_ps

TOKEN = "job-token-5f0c9a"
NBYTES = 64 << 10


@pytest.fixture(scope="module")
def job(variant, tmp_path_factory):
    """The ps reads the token from a file; the tasks in this process are given it."""
    token_file = tmp_path_factory.mktemp("token") / "token"
    token_file.write_text(TOKEN + "\n")
    job = start_ps(cluster_spec({"ps": 1, "worker": 1}), variant,
                   {"TENSORVERBS_TOKEN_FILE": str(token_file)})
    yield job
    job.ps.stop()


def _received(worker, name: str, step: int, seed: int) -> bool:
    return same(worker.recv(name, PS, step, timeout=60), pattern(NBYTES, seed))


def test_a_task_with_another_token_neither_receives_nor_is_served(job, step):
    job.ps.send_pattern("t", WORKER, step, NBYTES, seed=1)
    with job.worker(token="another-job") as intruder:
        refused(lambda: intruder.recv("t", PS, step, timeout=30), within=5)
        intruder.send("u", pattern(NBYTES, 2), to=PS, step_id=step)
        refused(lambda: job.ps.recv("u", WORKER, step, timeout=30), within=5)
        assert intruder.pending() == (1, 0)
        assert intruder.stats()["tensors_sent"] == 0
    assert job.ps.pending() == (1, 0)
    with job.worker(token=TOKEN) as worker:  # the job's own worker gets what was kept from it
        assert _received(worker, "t", step, seed=1)


def _call(channel: grpc.Channel, name: str, request: bytes, metadata) -> grpc.StatusCode:
    """The status of a raw call of ``name`` (any kind of method) with ``request``."""
    m = pb.DESCRIPTOR.services_by_name["TensorverbsService"].methods_by_name[name]
    kinds = {(False, False): channel.unary_unary, (False, True): channel.unary_stream,
             (True, False): channel.stream_unary, (True, True): channel.stream_stream}
    call = kinds[(m.client_streaming, m.server_streaming)](method(name))
    try:
        answer = call(iter([request]) if m.client_streaming else request, timeout=10, metadata=metadata)
        if m.server_streaming:
            list(answer)
    except grpc.RpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


def test_a_caller_without_the_token_is_refused_by_every_method(job, step):
    methods = pb.DESCRIPTOR.services_by_name["TensorverbsService"].methods
    with job.worker(token=TOKEN) as worker:
        job.ps.send_pattern("warm", WORKER, step, NBYTES, seed=3)
        assert _received(worker, "warm", step, seed=3)  # with grpc+verbs, a live channel
        job.ps.send_pattern("t", WORKER, step, NBYTES, seed=4)
        # what a caller would send to take the tensor, or to replace the worker's channel
        requests = {
            "RecvTensor": pb.RecvTensorRequest(step_id=step, request_id=1, rendezvous_key=format_key(
                RendezvousKey(parse_task(PS), 0, parse_task(WORKER), "t"))),
            "GetRemoteAddress": pb.GetRemoteAddressRequest(
                host_name=WORKER, incarnation=worker.incarnation,
                channel=pb.Channel(provider="soft", provider_info=b"\0" * 64)),
        }
        with grpc.insecure_channel(job.spec["ps"][0]) as channel:
            for m in methods:
                request = requests.get(m.name, pb.GetStatusRequest()).SerializeToString()
                for metadata in (None, ((HEADER, "wrong-token"),), ((HEADER, TOKEN.upper()),)):
                    assert _call(channel, m.name, request, metadata) == grpc.StatusCode.UNAUTHENTICATED, m.name
            health = health_pb2_grpc.HealthStub(channel)
            for service in ("", SERVICE):
                answer = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
                assert answer.status == health_pb2.HealthCheckResponse.SERVING
        assert _received(worker, "t", step, seed=4)  # neither taken nor its channel replaced
    assert {m.name for m in methods} >= {"GetStatus", "GetRemoteAddress", "RecvTensor", "CancelRecvTensor"}


def test_the_token_comes_from_the_argument_the_variable_or_the_file(tmp_path):
    (tmp_path / "token").write_text("from-file\n")
    file_only = {"TENSORVERBS_TOKEN_FILE": str(tmp_path / "token")}
    both = {"TENSORVERBS_TOKEN": "from-variable", **file_only}
    grant = JobToken("from-file").metadata(WORKER)
    assert JobToken.resolve(None, file_only).caller(grant) == WORKER
    assert JobToken.resolve(None, both).caller(JobToken("from-variable").metadata(WORKER)) == WORKER
    assert JobToken.resolve("from-file", both).caller(grant) == WORKER
    assert JobToken.resolve("from-file", {}).caller(grant + grant) is None  # one proof, not two
    assert JobToken.resolve(None, {}) is None
    with pytest.raises(tv.InvalidArgumentError, match="TENSORVERBS_TOKEN_FILE"):
        JobToken.resolve(None, {"TENSORVERBS_TOKEN_FILE": str(tmp_path / "missing")})


def test_a_task_with_another_token_cannot_reach_a_registered_buffer(job):
    """A descriptor of the job's registered buffer is no key for a task with another token:
    its reads and writes are refused, and the buffer is as it was for the job's own."""
    buffer = job.ps.call("run", "remote_buffers:register_pattern", NBYTES, 3)
    with job.worker(token="another-job") as intruder:
        refused(lambda: intruder.read(buffer, timeout=30), within=5)
        refused(lambda: intruder.write(buffer, pattern(NBYTES, 4), timeout=30), within=5)
    assert job.ps.call("run", "remote_buffers:holds", buffer, 0, NBYTES, 3)
    with job.worker(token=TOKEN) as worker:
        assert same(worker.read(buffer, timeout=60).reshape(-1).view("uint8"), pattern(NBYTES, 3))
