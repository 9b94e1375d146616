"""Every public call raises TensorverbsError subclasses only: a caller's mistake (an
argument of a wrong type or value) is InvalidArgumentError, a cancelled recv's future
raises CancelledError and a wait on it that times out DeadlineExceededError."""
from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import pickle
from typing import Any, Callable

import numpy as np
import pytest

import tensorverbs as tv
from tensorverbs.local_cluster import cluster_spec
from tensorverbs.one_sided.publication import PublishedTensor

#: an argument of a type no public call takes
BAD = object()
PS = "/job:ps/replica:0/task:0"
#: a descriptor of a buffer of the ps
BUFFER = tv.RemoteBuffer(PS, 1, "soft", 1 << 20, 1, 64, "uint8", (64,), True)
#: a publication of the ps (of a tensor "w" of 2 float64 elements)
PUBLICATION = tv.PublicationRef(PS, BUFFER, (BUFFER, BUFFER), (PublishedTensor("w", "float64", (2,), 0, 16),), None)


class _Resolver(tv.resolvers.ClusterResolver):
    def __init__(self, cluster: dict) -> None:
        super().__init__("worker", 0)
        self._cluster = cluster

    def cluster_spec(self) -> tv.ClusterSpec:
        return tv.ClusterSpec(self._cluster)


@pytest.fixture(scope="module")
def spec():
    return cluster_spec({"ps": 1, "worker": 1})


@pytest.fixture(scope="module")
def server(spec):
    with tv.Server(spec, "worker", 0, startup_grace=1.0) as server:
        yield server


def _server_calls(spec: dict) -> dict[str, tuple[Callable[..., Any], dict[str, Any]]]:
    """Server's public callables -> (how to call it on a server, valid arguments)."""
    def method(name: str) -> Callable[..., Any]:
        return lambda server, **kw: getattr(server, name)(**kw)

    recv = dict(name="w", source=PS, step_id=1, timeout=0.01, device=None, out=None, dtype=None,
                tensor_type=None)
    many = dict(entries=[("w", PS, 1)], timeout=0.01, device=None, dtype=None, tensor_type=None)
    return {
        "send": (method("send"), dict(name="w", value=np.ones(2), to=PS, step_id=1, is_dead=False)),
        "send_many": (method("send_many"), dict(entries=[("w", np.ones(2), PS, 1)])),
        "send_blocks": (method("send_blocks"), dict(name="b", blocks=np.ones((2, 2)), to=PS, step_id=1, index=None)),
        "recv_blocks": (method("recv_blocks"), dict(name="b", source=PS, out=np.ones((2, 2)), step_id=1, index=None,
                                                    timeout=0.01, return_exceptions=True)),
        "recv_many": (method("recv_many"), dict(many, return_exceptions=True)),
        "recv_many_async": (lambda server, **kw: [f.result(10) for f in server.recv_many_async(**kw)], many),
        "arecv_many": (lambda server, **kw: asyncio.run(server.arecv_many(**kw)), dict(many, return_exceptions=True)),
        "recv": (method("recv"), recv),
        "recv_async": (lambda server, **kw: server.recv_async(**kw).result(10), recv),
        "arecv": (lambda server, **kw: asyncio.run(server.arecv(**kw)), recv),
        "allocate": (method("allocate"), dict(shape=(2,), dtype=np.float32, one_sided=False)),
        "add_task": (method("add_task"), dict(job_name="extra", task_index=0, address="127.0.0.1:1")),
        "abort_step": (method("abort_step"), dict(step_id=1, reason="")),
        "cleanup_step": (method("cleanup_step"), dict(step_id=1)),
        "join": (method("join"), dict(timeout=0.0)),
        "flush": (method("flush"), dict(timeout=0.0)),
        "knows": (method("knows"), dict(task=PS)),
        "register": (method("register"), dict(tensor=np.ones(2), writable=True)),
        "unregister": (method("unregister"), dict(buffer=BUFFER)),
        "read": (method("read"), dict(buffer=BUFFER, out=np.ones(2), offset=0, nbytes=None, timeout=0.01)),
        "read_many": (method("read_many"), dict(entries=[(BUFFER, np.ones(2))], timeout=0.01)),
        "read_blocks": (method("read_blocks"), dict(buffer=BUFFER, out=np.ones((2, 1)), blocks=[0], index=None,
                                                    timeout=0.01)),
        "aread_blocks": (lambda server, **kw: asyncio.run(server.aread_blocks(**kw)),
                         dict(buffer=BUFFER, out=np.ones((2, 1)), blocks=[0], index=None, timeout=0.01)),
        "write": (method("write"), dict(buffer=BUFFER, tensor=np.ones(2), offset=0, timeout=0.01)),
        "aread": (lambda server, **kw: asyncio.run(server.aread(**kw)),
                  dict(buffer=BUFFER, out=np.ones(2), offset=0, nbytes=None, timeout=0.01)),
        "aread_many": (lambda server, **kw: asyncio.run(server.aread_many(**kw)),
                       dict(entries=[(BUFFER, np.ones(2))], timeout=0.01)),
        "awrite": (lambda server, **kw: asyncio.run(server.awrite(**kw)),
                   dict(buffer=BUFFER, tensor=np.ones(2), offset=0, timeout=0.01)),
        "publish": (method("publish"), dict(tensors={"w": np.ones(2)}, version=1, checksums=False, grace=0.0)),
        "read_publication": (method("read_publication"), dict(publication=PUBLICATION, out=None, timeout=0.01)),
        "aread_publication": (lambda server, **kw: asyncio.run(server.aread_publication(**kw)),
                              dict(publication=PUBLICATION, out=None, timeout=0.01)),
        "from_resolver": (lambda server, **kw: tv.Server.from_resolver(**kw).stop(),
                          dict(resolver=_Resolver(spec), protocol="grpc")),
    }


#: Server's public methods and properties that take no argument
NO_ARGUMENTS = {"pending", "stats", "stop", "task", "target", "metrics_address"}


def test_every_public_method_is_driven(spec):
    public = {name for name in dir(tv.Server) if not name.startswith("_")}
    assert public == set(_server_calls(spec)) | NO_ARGUMENTS


def _cases(spec: dict):
    for name, (call, valid) in _server_calls(spec).items():
        for param in valid:
            yield pytest.param(call, {**valid, param: BAD}, id=f"{name}-{param}")


def _refused(call: Callable[[], Any]) -> None:
    """``call()`` must raise InvalidArgumentError: a caller's mistake."""
    try:
        call()
    except Exception as exc:
        assert isinstance(exc, tv.InvalidArgumentError), f"raised {type(exc).__name__}: {exc}"
    else:
        pytest.fail("a bad argument was accepted")


@pytest.mark.parametrize("call, kwargs", list(_cases(cluster_spec({"ps": 1, "worker": 1}))))
def test_server_methods_with_a_bad_argument(server, call, kwargs):
    _refused(lambda: call(server, **kwargs))


@pytest.mark.parametrize("timeout, expected", [
    (-1, "timeout is -1: expected 0 or more seconds"),
    (-0.5, "timeout is -0.5: expected 0 or more seconds"),
    (float("inf"), "timeout is inf: expected at most 1e[+]09 seconds"),
    (1e300, "timeout is 1e[+]300: expected at most 1e[+]09 seconds"),
], ids=["-1", "-0.5", "inf", "1e300"])
@pytest.mark.parametrize("call, kwargs", [
    pytest.param(call, valid, id=name)
    for name, (call, valid) in _server_calls(cluster_spec({"ps": 1, "worker": 1})).items() if "timeout" in valid])
def test_server_methods_with_a_timeout_out_of_range(server, call, kwargs, timeout, expected):
    """Out of range: a negative timeout, or one longer than a thread can wait (None waits
    without limit)."""
    with pytest.raises(tv.InvalidArgumentError, match=expected):
        call(server, **{**kwargs, "timeout": timeout})


SERVER_ARGS = dict(job_name="worker", task_index=0, protocol="grpc", config=None, startup_grace=1.0,
                   bind_address=None, token=None, tls=None, metrics_port=None, spare_tasks=0,
                   device_ipc=None, tensor_type="numpy")


@pytest.mark.parametrize("param", ["cluster", *SERVER_ARGS])
def test_server_constructor_with_a_bad_argument(param):
    assert set(inspect.signature(tv.Server).parameters) == {"cluster", *SERVER_ARGS}
    kwargs = dict(cluster=cluster_spec({"worker": 1}), **SERVER_ARGS)
    kwargs[param] = BAD
    _refused(lambda: tv.Server(**kwargs).stop())


def test_server_constructor_with_a_negative_startup_grace():
    with pytest.raises(tv.InvalidArgumentError, match="startup_grace is -1: expected 0 or more seconds"):
        tv.Server(cluster_spec({"worker": 1}), "worker", 0, startup_grace=-1).stop()


@pytest.mark.parametrize("call", [
    lambda: tv.ClusterSpec(BAD),
    lambda: tv.ClusterSpec({"ps": BAD}),
    lambda: tv.ClusterSpec({"ps": ["127.0.0.1:1"]}).resolve(BAD),
    lambda: tv.ClusterSpec({"ps": ["127.0.0.1:1"]}).address(BAD),
    lambda: tv.ClusterSpec({"ps": ["127.0.0.1:1"]}).add_task(BAD, 0, "127.0.0.1:2"),
    lambda: tv.ClusterSpec({"ps": ["127.0.0.1:1"]}).add_task("w", BAD, "127.0.0.1:2"),
    lambda: tv.ClusterSpec({"ps": ["127.0.0.1:1"]}).add_task("w", 0, BAD),
    lambda: tv.ClusterSpec.from_tf_config(BAD),
    lambda: tv.parse_task(BAD),
    lambda: tv.parse_key(BAD),
    lambda: tv.format_key(BAD),
    lambda: tv.resolvers.TFConfigClusterResolver(environ=BAD),
    lambda: tv.resolvers.SlurmClusterResolver(environ=BAD),
    lambda: tv.resolvers.TorchrunClusterResolver(environ=BAD),
], ids=lambda call: inspect.getsource(call).strip().split("lambda: ")[1].rstrip(","))
def test_module_calls_with_a_bad_argument(call):
    _refused(call)


def test_a_cancelled_recv_raises_cancelled_error(server):
    fut = server.recv_async("never", PS, step_id=5)
    assert fut.cancel()
    with pytest.raises(tv.CancelledError):
        fut.result()
    with pytest.raises(tv.CancelledError):
        fut.exception()


def test_waiting_too_short_for_a_recv_raises_deadline_exceeded(server):
    fut = server.recv_async("later", PS, step_id=6)
    try:
        with pytest.raises(tv.DeadlineExceededError):
            fut.result(timeout=0.01)
        with pytest.raises(tv.DeadlineExceededError):
            fut.exception(timeout=0.01)
    finally:
        fut.cancel()


@pytest.mark.parametrize("cls, builtin", [
    (tv.DeadlineExceededError, TimeoutError),
    (tv.CancelledError, concurrent.futures.CancelledError),
])
def test_errors_of_a_deadline_and_a_cancel_are_python_s_own_too(cls, builtin):
    """Code written for concurrent.futures catches them; they stay TensorverbsErrors with
    their code, text and pickling."""
    made = cls("it ended")
    rebuilt = tv.errors.from_code(int(cls.code), "it ended")
    for err in (made, rebuilt, pickle.loads(pickle.dumps(made))):
        assert type(err) is cls and isinstance(err, builtin) and isinstance(err, tv.TensorverbsError)
        assert str(err) == f"{cls.code.name}: it ended" and err.message == "it ended"
        for caught_as in (builtin, tv.TensorverbsError, cls):
            with pytest.raises(caught_as):
                raise err


def test_a_recv_that_timed_out_raises_a_timeout_error(server):
    with pytest.raises(TimeoutError, match=r"recv of 'gone' from .* timed out after 0.01 s") as raised:
        server.recv("gone", server.task, step_id=7, timeout=0.01)
    assert type(raised.value) is tv.DeadlineExceededError and raised.value.__cause__ is None


def test_a_recv_future_raises_the_error_its_recv_ended_with():
    """The recv's own timeout and a stop: the future raises what the recv ended with, not
    an error of the wait on it."""
    with tv.Server(cluster_spec({"worker": 1}), "worker", 0) as server:
        timed_out = server.recv_async("gone", server.task, step_id=8, timeout=0.01)
        with pytest.raises(tv.DeadlineExceededError, match="timed out after 0.01 s"):
            timed_out.result()
        with pytest.raises(tv.DeadlineExceededError, match="timed out after 0.01 s"):
            timed_out.result(timeout=30)
        stopped = server.recv_async("never", server.task, step_id=8)
    with pytest.raises(tv.CancelledError, match="the server stopped"):
        stopped.result(timeout=30)
    with pytest.raises(concurrent.futures.CancelledError):
        stopped.result()
    assert not stopped.cancelled()


def test_a_cancelled_recv_raises_concurrent_futures_cancelled_error(server):
    fut = server.recv_async("never", PS, step_id=9)
    assert fut.cancel()
    with pytest.raises(concurrent.futures.CancelledError):
        fut.result()
