"""The mistakes of a caller new to tensorverbs say what they are: a call with arguments its
signature does not take raises Python's own TypeError, unchanged (not an InternalError,
which means a bug of tensorverbs); a negative timeout is an InvalidArgumentError naming
it; a list of tensors is refused with a word of TensorList, not stacked into one array."""
from __future__ import annotations

import asyncio

import numpy as np
import pytest

import tensorverbs as tv
from tensorverbs.errors import public
from tensorverbs.local_cluster import cluster_spec

from variants import start_pair

WAIT = 30.0


@pytest.fixture(scope="module")
def pair():
    p = start_pair("grpc", {})
    yield p
    p.worker.stop()
    p.ps.stop()


def _type_error(call) -> str:
    """``call()`` must raise a TypeError of Python's own, as it made it: its text."""
    with pytest.raises(TypeError) as raised:
        call()
    assert type(raised.value) is TypeError, f"raised {type(raised.value).__name__}: {raised.value}"
    assert raised.value.__cause__ is None
    return str(raised.value)


def test_calls_with_arguments_their_signature_does_not_take_raise_type_error(pair):
    worker, ps = pair.worker, pair.PS
    assert "'to'" in _type_error(lambda: worker.send("w", np.ones(2)))
    assert "'chain'" in _type_error(lambda: worker.send("w", np.ones(2), to=ps, chain=True))
    assert "'source'" in _type_error(lambda: worker.recv("w"))
    assert "'bogus'" in _type_error(lambda: worker.recv_many([("w", ps)], bogus=1))
    assert "'source'" in _type_error(lambda: asyncio.run(worker.arecv("w")))
    assert "'bogus'" in _type_error(lambda: worker.flush(1, bogus=2))
    assert "'port'" in _type_error(lambda: tv.Server(cluster_spec({"ps": 1}), "ps", 0, port=2222))
    assert "'task_index'" in _type_error(lambda: tv.Server(cluster_spec({"ps": 1}), "ps"))


def test_a_type_error_passed_on_by_a_call_taking_keywords_stays_the_caller_s():
    resolver = tv.resolvers.TFConfigClusterResolver(environ={"TF_CONFIG": (
        '{"cluster": {"ps": ["127.0.0.1:1"]}, "task": {"type": "ps", "index": 0}}')})
    assert "'port'" in _type_error(lambda: tv.Server.from_resolver(resolver, port=2222))


def test_a_type_error_within_a_call_is_still_a_bug():
    @public
    def broken(value: int) -> int:
        return len(value)  # type: ignore[arg-type]

    @public
    async def broken_async(value: int) -> int:
        return len(value)  # type: ignore[arg-type]

    for call in (lambda: broken(1), lambda: asyncio.run(broken_async(1))):
        with pytest.raises(tv.InternalError, match=r"broken(_async)? failed: TypeError: object of type 'int'") as raised:
            call()
        assert type(raised.value.__cause__) is TypeError
    assert "'value'" in _type_error(lambda: broken())
    assert "'value'" in _type_error(lambda: asyncio.run(broken_async()))


@pytest.mark.parametrize("call", [
    lambda server, fut, handle: tv.wait([fut], timeout=-1),
    lambda server, fut, handle: list(tv.as_completed([fut], timeout=-1)),
    lambda server, fut, handle: handle.wait(timeout=-1),
    lambda server, fut, handle: handle.exception(timeout=-1),
    lambda server, fut, handle: tv.wait([fut], timeout="soon"),
    lambda server, fut, handle: handle.wait(timeout="soon"),
], ids=["wait", "as_completed", "SendHandle.wait", "SendHandle.exception", "wait-str", "SendHandle.wait-str"])
def test_waits_refuse_a_bad_timeout(pair, step, call):
    fut = pair.worker.recv_async("w", pair.PS, step, timeout=WAIT)
    handle = pair.worker.send("w", np.ones(2), to=pair.PS, step_id=step)
    try:
        with pytest.raises(tv.InvalidArgumentError, match="timeout"):
            call(pair.worker, fut, handle)
    finally:
        fut.cancel()
        pair.worker.cleanup_step(step)


@pytest.mark.parametrize("value", [
    [np.ones(2), np.ones(2)],
    (np.ones(2), np.ones(3)),
    [np.ones(2), 1.0],
    [[np.ones(2)], [np.ones(2)]],
], ids=["arrays", "unequal-shapes", "array-and-number", "nested"])
def test_a_list_of_tensors_is_refused_with_a_word_of_tensor_list(pair, step, value):
    with pytest.raises(tv.InvalidArgumentError, match=r"tv\.TensorList"):
        pair.worker.send("l", value, to=pair.PS, step_id=step)
    assert pair.worker.pending() == (0, 0)


def test_a_list_of_torch_tensors_is_refused_with_a_word_of_tensor_list(pair, step):
    torch = pytest.importorskip("torch")
    with pytest.raises(tv.InvalidArgumentError, match=r"tv\.TensorList"):
        pair.worker.send("l", [torch.ones(2), torch.ones(2)], to=pair.PS, step_id=step)


def test_a_list_of_numbers_and_strings_is_refused(pair, step):
    with pytest.raises(tv.InvalidArgumentError, match="numbers and strings"):
        pair.worker.send("l", [1.0, "a"], to=pair.PS, step_id=step)
    with pytest.raises(tv.InvalidArgumentError, match="numbers and strings"):
        pair.worker.send("l", [[1, 2], [b"x", b"y"]], to=pair.PS, step_id=step)


def test_a_list_of_anything_else_is_refused(pair, step):
    with pytest.raises(tv.InvalidArgumentError, match="an item of type NoneType is not a tensor"):
        pair.worker.send("l", [1.0, None], to=pair.PS, step_id=step)


@pytest.mark.parametrize("value, expected", [
    ([1.0, 2.5], np.array([1.0, 2.5])),
    (((1, 2), (3, 4)), np.array([[1, 2], [3, 4]])),
    ([np.float32(1), True, 3], np.array([1.0, 1.0, 3.0], dtype=np.float64)),
    (["a", b"bc"], np.array([b"a", b"bc"], dtype=object)),
    ([], np.array([], dtype=np.float64)),
], ids=["floats", "nested-ints", "numpy-scalars", "strings", "empty"])
def test_a_list_of_numbers_or_of_strings_arrives_as_numpy_makes_it(pair, step, value, expected):
    pair.ps.call("send", "l", value, to=pair.WORKER, step_id=step)
    got = pair.worker.recv("l", pair.PS, step, timeout=WAIT)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    assert got.tolist() == expected.tolist()
