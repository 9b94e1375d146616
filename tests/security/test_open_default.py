"""The default is open, and says so: a task that listens beyond loopback without a job token
or TLS logs a warning at start naming its address, what any client reaching it can do and
how to close it; a task on loopback, or with a token or TLS, says nothing of the kind. The
resolvers carry a token to the server they start."""
from __future__ import annotations

import json
import logging

import grpc
import pytest

import tensorverbs as tv
from tensorverbs.certs import write_cluster
from tensorverbs.cluster import ClusterSpec
from tensorverbs.local_cluster import cluster_spec
from tensorverbs.rpc import tensorverbs_pb2 as pb
from tensorverbs.rpc.auth import JobToken
from tensorverbs.rpc.options import method

from secured import tls_config

SETTINGS = ("TENSORVERBS_TOKEN", "TENSORVERBS_TOKEN_FILE", "TENSORVERBS_TLS_CERT", "TENSORVERBS_TLS_KEY",
            "TENSORVERBS_TLS_CA")


@pytest.fixture(autouse=True)
def no_settings(monkeypatch):
    """No token or TLS from this process's environment."""
    for name in SETTINGS:
        monkeypatch.delenv(name, raising=False)


def _warnings(caplog, **server_kwargs) -> list[str]:
    """The warnings a server of a one-task cluster logs as it starts and stops."""
    spec = cluster_spec({"worker": 1})
    with caplog.at_level(logging.WARNING, logger="tensorverbs"):
        tv.Server(spec, "worker", 0, **server_kwargs).stop()
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_task_open_beyond_loopback_warns_naming_what_is_open(caplog):
    bind = f"0.0.0.0:{cluster_spec({'worker': 1})['worker'][0].rsplit(':', 1)[1]}"
    warnings = _warnings(caplog, bind_address=bind)
    assert len(warnings) == 1, warnings
    warning = warnings[0]
    assert bind in warning and "/job:worker/replica:0/task:0" in warning
    assert "any client that reaches it" in warning
    assert "take its tensors" in warning and "verbs channels" in warning
    assert "TENSORVERBS_TOKEN" in warning and "TENSORVERBS_TOKEN_FILE" in warning and "TLS" in warning


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_a_task_on_loopback_does_not_warn(caplog, host):
    port = cluster_spec({"worker": 1})["worker"][0].rsplit(":", 1)[1]
    assert _warnings(caplog, bind_address=f"{host}:{port}") == []


def test_a_task_with_a_token_or_tls_does_not_warn(caplog, tmp_path):
    port = cluster_spec({"worker": 1})["worker"][0].rsplit(":", 1)[1]
    assert _warnings(caplog, bind_address=f"0.0.0.0:{port}", token="job-token") == []
    spec = {"worker": [f"127.0.0.1:{port}"]}
    write_cluster(tmp_path, ClusterSpec(spec))
    tls = tls_config(tmp_path, "/job:worker/replica:0/task:0")
    assert _warnings(caplog, bind_address=f"0.0.0.0:{port}", tls=tls) == []


def test_a_resolver_s_token_reaches_the_server_it_starts():
    spec = cluster_spec({"worker": 1})
    environ = {"TF_CONFIG": json.dumps({"cluster": spec, "task": {"type": "worker", "index": 0}})}
    resolver = tv.resolvers.TFConfigClusterResolver(environ=environ, token="job-token")
    assert "job-token" not in repr(resolver)
    with tv.Server.from_resolver(resolver), grpc.insecure_channel(spec["worker"][0]) as channel:
        status = channel.unary_unary(method("GetStatus"), request_serializer=pb.GetStatusRequest.SerializeToString,
                                     response_deserializer=pb.GetStatusResponse.FromString)
        with pytest.raises(grpc.RpcError) as refused:
            status(pb.GetStatusRequest(), timeout=10)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        proof = JobToken("job-token").metadata("/job:worker/replica:0/task:0")
        assert status(pb.GetStatusRequest(), timeout=10, metadata=proof).task
