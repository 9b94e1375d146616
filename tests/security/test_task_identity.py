"""A task acts only as itself: a task of the job that calls the ps for another task (to
take its tensor, to set up or replace its verbs channel, to withdraw its call) is refused
with PERMISSION_DENIED naming both (its confirmation of another's tensor is ignored), under mutual TLS (each task's certificate names it)
and with the job token (each call carries its task's proof); the other task is unharmed.
The intruder is worker 1, calling with raw gRPC stubs as an attacker would."""
from __future__ import annotations

import multiprocessing
import threading
import time
from typing import Any

import grpc
import numpy as np
import pytest

import tensorverbs as tv
from tensorverbs.devices import STAND_IN
from tensorverbs.certs import write_cluster
from tensorverbs.cluster import ClusterSpec, parse_task
from tensorverbs.local_cluster import cluster_spec, pattern, same
from tensorverbs.rendezvous.key import RendezvousKey, format_key
from tensorverbs.rpc import tensorverbs_pb2 as pb
from tensorverbs.rpc.auth import JobToken
from tensorverbs.rpc.options import method
from tensorverbs.verbs.config import RdmaConfig

from secured import PS, WORKER, Job, start_ps, tls_config, tls_env
from variants import VARIANTS

WORKER1 = "/job:worker/replica:0/task:1"
TOKEN = "job-token-31c8e2"
NBYTES = 64 << 10


@pytest.fixture(scope="module", params=["tls", "token"])
def credential(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def job(variant, credential, tmp_path_factory):
    spec = cluster_spec({"ps": 1, "worker": 2})
    certs = tmp_path_factory.mktemp("certs")
    write_cluster(certs, ClusterSpec(spec))
    if credential == "tls":
        env = tls_env(certs, PS)
    else:
        token_file = tmp_path_factory.mktemp("token") / "token"
        token_file.write_text(TOKEN)
        env = {"TENSORVERBS_TOKEN_FILE": str(token_file)}
    job = start_ps(spec, variant, env)
    job.certs = certs  # type: ignore[attr-defined]
    job.credential = credential  # type: ignore[attr-defined]
    yield job
    job.ps.stop()


def _as(job, task: str) -> dict[str, Any]:
    """The Server arguments of ``task`` in ``job``."""
    return {"tls": tls_config(job.certs, task)} if job.credential == "tls" else {"token": TOKEN}


def _channel(address: str, credential: str, certs, task: str) -> tuple[grpc.Channel, tuple]:
    """A raw channel to ``address`` and the metadata of calls that prove ``task`` makes them."""
    if credential == "tls":
        return grpc.secure_channel(address, tls_config(certs, task).channel_credentials()), ()
    return grpc.insecure_channel(address), JobToken(TOKEN).metadata(task)


class Intruder:
    """Raw calls to the ps, proving that ``task`` (worker 1) makes them."""

    def __init__(self, job, task: str = WORKER1) -> None:
        self.channel, self.metadata = _channel(job.spec["ps"][0], job.credential, job.certs, task)

    def call(self, name: str, request: Any) -> grpc.RpcError | None:
        """The error of a raw call of ``name`` (None when it was answered)."""
        streaming = name == "RecvTensor"
        kind = self.channel.stream_stream if streaming else self.channel.unary_unary
        try:
            answer = kind(method(name))(iter([request.SerializeToString()]) if streaming
                                        else request.SerializeToString(), timeout=10, metadata=self.metadata)
            if streaming:
                next(iter(answer))
        except grpc.RpcError as exc:
            return exc
        return None

    def close(self) -> None:
        self.channel.close()


@pytest.fixture
def intruder(job):
    intruder = Intruder(job)
    yield intruder
    intruder.close()


def _denied(error: grpc.RpcError | None, *tasks: str) -> None:
    assert error is not None, "served"
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED, error
    for task in tasks:
        assert task in error.details(), error.details()


def test_a_task_cannot_take_a_tensor_sent_to_another(job, intruder, step):
    job.ps.send_pattern("t", WORKER, step, NBYTES, seed=1)
    key = format_key(RendezvousKey(parse_task(PS), 0, parse_task(WORKER), "t"))
    _denied(intruder.call("RecvTensor", pb.RecvTensorRequest(step_id=step, request_id=7, rendezvous_key=key)),
            WORKER1, WORKER)
    assert job.ps.pending() == (1, 0)  # not taken
    with job.worker(**_as(job, WORKER)) as worker:
        assert same(worker.recv("t", PS, step, timeout=60), pattern(NBYTES, 1))


def _read_and_hold(address: str, credential: str, certs, request: bytes, conn) -> None:
    """In a child process: make ``request`` as worker 0, read the first answer, tell
    ``conn``, and hold the call open, unconfirmed (until the parent kills this process)."""
    channel, metadata = _channel(address, credential, certs, WORKER)

    def requests():
        yield request
        threading.Event().wait()

    call = channel.stream_stream(method("RecvTensor"))(requests(), metadata=metadata)
    next(call)
    conn.send("read")
    threading.Event().wait()


def test_a_task_cannot_settle_a_tensor_sent_to_another(job, intruder, step):
    """Worker 0 (raw calls, in a process of its own) has a tensor on its way to it and does
    not confirm it in its call: the ps holds it. Worker 1's word on that call (taken or
    dropped) changes nothing; worker 0's own settles it: once its call ends, the tensor
    is delivered, not back in the table."""
    if job.protocol != "grpc":
        pytest.skip("only the grpc protocol's RecvTensor calls confirm tensors")
    job.ps.send_pattern("t", WORKER, step, NBYTES, seed=7)
    key = format_key(RendezvousKey(parse_task(PS), 0, parse_task(WORKER), "t"))
    request = pb.RecvTensorRequest(step_id=step, request_id=11, rendezvous_key=key, receiver_incarnation=5)
    ctx = multiprocessing.get_context("spawn")
    ours, theirs = ctx.Pipe()
    reader = ctx.Process(target=_read_and_hold, args=(job.spec["ps"][0], job.credential, job.certs,
                                                      request.SerializeToString(), theirs), daemon=True)
    reader.start()
    owner = Intruder(job, WORKER)
    try:
        assert ours.poll(60) and ours.recv() == "read"
        deadline = time.monotonic() + 30
        while job.ps.stats()["tensors_unconfirmed"] < 1:
            assert time.monotonic() < deadline, "the ps never held the tensor"
            time.sleep(0.01)  # (a condition, polled)
        held, pending = job.ps.stats()["tensors_unconfirmed"], job.ps.pending()
        assert intruder.call("SettleRecvTensors", pb.SettleRecvTensorsRequest(taken=[11], dropped=[11])) is None
        assert (job.ps.stats()["tensors_unconfirmed"], job.ps.pending()) == (held, pending)
        assert owner.call("SettleRecvTensors", pb.SettleRecvTensorsRequest(taken=[11])) is None
        assert job.ps.stats()["tensors_unconfirmed"] == held - 1
    finally:
        owner.close()
        reader.kill()
        reader.join(30)
    job.ps.flush(60)  # delivered, once: not back in the table when the call ended
    assert job.ps.pending() == pending


def test_a_task_cannot_set_up_or_replace_another_s_channel(job, intruder, step):
    with job.worker(**_as(job, WORKER)) as worker:
        job.ps.send_pattern("warm", WORKER, step, NBYTES, seed=2)
        assert same(worker.recv("warm", PS, step, timeout=60), pattern(NBYTES, 2))
        claim = pb.GetRemoteAddressRequest(host_name=WORKER, incarnation=worker.incarnation,
                                           channel=pb.Channel(provider="soft", provider_info=b"\0" * 64))
        _denied(intruder.call("GetRemoteAddress", claim), WORKER1, WORKER)
        access = pb.GetRemoteAccessRequest(host_name=WORKER, incarnation=worker.incarnation, provider="soft")
        _denied(intruder.call("GetRemoteAccess", access), WORKER1, WORKER)
        job.ps.send_pattern("after", WORKER, step, NBYTES, seed=3)  # over the same channel
        assert same(worker.recv("after", PS, step, timeout=60), pattern(NBYTES, 3))


def test_a_task_s_own_calls_are_served(job, step):
    with job.worker(**_as(job, WORKER)) as w0, tv.Server(
            job.spec, "worker", 1, job.protocol, config=RdmaConfig.from_env(job.env), **_as(job, WORKER1)) as w1:
        job.ps.send_pattern("a", WORKER, step, NBYTES, seed=4)
        job.ps.send_pattern("b", WORKER1, step, NBYTES, seed=5)
        assert same(w1.recv("b", PS, step, timeout=60), pattern(NBYTES, 5))
        assert same(w0.recv("a", PS, step, timeout=60), pattern(NBYTES, 4))



def test_a_task_cannot_release_shared_tensors_sent_to_another(variant, credential, tmp_path, step):
    """A ps passes a stand-in device tensor to worker 0 by handle (both in this process):
    worker 1's release of the ps's exports is refused and frees nothing, and worker 0
    opens the tensor."""
    spec = cluster_spec({"ps": 1, "worker": 2})
    write_cluster(tmp_path, ClusterSpec(spec))
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    own = Job(spec, None, *VARIANTS[variant])  # (no ps process: both tasks run here)
    own.certs, own.credential = tmp_path, credential  # type: ignore[attr-defined]
    config = RdmaConfig.from_env(own.env)
    with tv.Server(spec, "worker", 0, own.protocol, config=config, device_ipc=True, **_as(own, WORKER)) as worker, \
            tv.Server(spec, "ps", 0, own.protocol, config=config, device_ipc=True, **_as(own, PS)) as ps:
        ps.send("x", STAND_IN.from_host(pattern(NBYTES, 6, "float32")), to=WORKER, step_id=step)
        assert ps.stats()["ipc_exports"] == 1
        intruder = Intruder(own)
        try:
            release = pb.ReleaseSharedTensorRequest(incarnation=ps.incarnation, export_ids=range(1, 9))
            _denied(intruder.call("ReleaseSharedTensor", release), WORKER1, WORKER)
        finally:
            intruder.close()
        assert ps.stats()["ipc_exports"] == 1
        got = worker.recv("x", PS, step, timeout=60, device="cpu:proxy")
        assert same(got.view(np.ndarray), pattern(NBYTES, 6, "float32"))
