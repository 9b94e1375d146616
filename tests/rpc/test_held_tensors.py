"""The sender's side of the receiver's word (the grpc protocol), asked with raw RecvTensor
calls as a receiver would make them: a tensor on its way is held, neither delivered nor
back in the table, whatever ends its call, until the receiver's word on the call, or a
call of the receiver's next incarnation; given back into an aborted step, its send
fails."""
from __future__ import annotations

import threading

import grpc
import pytest

import tensorverbs as tv
from tensorverbs.local_cluster import cluster_spec, pattern, same
from tensorverbs.rpc import tensorverbs_pb2 as pb
from tensorverbs.rpc.options import method

PS, WORKER = "/job:ps/replica:0/task:0", "/job:worker/replica:0/task:0"
NBYTES = 64 << 10


@pytest.fixture
def ps():
    spec = cluster_spec({"ps": 1, "worker": 1})
    with tv.Server(spec, "ps", 0, "grpc") as server, grpc.insecure_channel(spec["ps"][0]) as channel:
        server.spec, server.channel = spec, channel  # type: ignore[attr-defined]
        yield server


def _key(ps: tv.Server, name: str) -> str:
    return f"{PS}/device:CPU:0;{ps.incarnation:016x};{WORKER}/device:CPU:0;{name};0:0"


def _read_first_and_end(ps: tv.Server, name: str, step: int, request_id: int, incarnation: int = 5) -> None:
    """A raw call of the worker for ``name`` that reads the first answer, then ends (cancelled)."""
    call = ps.channel.stream_stream(method("RecvTensor"))  # type: ignore[attr-defined]
    ended = threading.Event()

    def requests():
        yield pb.RecvTensorRequest(step_id=step, request_id=request_id, rendezvous_key=_key(ps, name),
                                   receiver_incarnation=incarnation).SerializeToString()
        ended.wait(60)

    answers = call(requests(), timeout=60)
    try:
        next(answers)
    finally:
        answers.cancel()
        ended.set()


def _settle(ps: tv.Server, **word: list[int]) -> None:
    settle = ps.channel.unary_unary(method("SettleRecvTensors"),  # type: ignore[attr-defined]
                                    request_serializer=pb.SettleRecvTensorsRequest.SerializeToString)
    settle(pb.SettleRecvTensorsRequest(**word), timeout=30)


def test_a_tensor_on_its_way_is_held_until_the_receivers_word(ps):
    handle = ps.send("t", pattern(NBYTES, 1), to=WORKER, step_id=3)
    _read_first_and_end(ps, "t", 3, request_id=21)
    assert ps.stats()["tensors_unconfirmed"] == 1 and ps.pending() == (0, 0)  # held, whatever ended the call
    assert not handle.done()
    _settle(ps, dropped=[21])
    assert ps.stats()["tensors_unconfirmed"] == 0 and ps.pending() == (1, 0)  # back in the table
    with tv.Server(ps.spec, "worker", 0, "grpc") as worker:  # type: ignore[attr-defined]
        assert same(worker.recv("t", PS, 3, timeout=60), pattern(NBYTES, 1))
    handle.wait(60)


def test_the_word_taken_delivers_a_held_tensor(ps):
    handle = ps.send("t", pattern(NBYTES, 2), to=WORKER, step_id=4)
    _read_first_and_end(ps, "t", 4, request_id=22)
    _settle(ps, taken=[22])
    handle.wait(60)
    assert ps.stats()["tensors_unconfirmed"] == 0 and ps.pending() == (0, 0)


def test_a_held_tensor_given_back_into_an_aborted_step_fails_its_send(ps):
    handle = ps.send("t", pattern(NBYTES, 3), to=WORKER, step_id=5)
    _read_first_and_end(ps, "t", 5, request_id=23)
    ps.abort_step(5, "the step went wrong")
    _settle(ps, dropped=[23])
    with pytest.raises(tv.AbortedError, match="went wrong"):
        handle.wait(60)
    ps.flush(timeout=10)


def test_a_call_of_the_receivers_next_incarnation_takes_back_what_its_last_one_left(ps):
    ps.send("t", pattern(NBYTES, 4), to=WORKER, step_id=6)
    _read_first_and_end(ps, "t", 6, request_id=24, incarnation=5)
    assert ps.stats()["tensors_unconfirmed"] == 1
    _read_first_and_end(ps, "t", 6, request_id=25, incarnation=6)  # the same tensor, again
    assert ps.stats()["tensors_unconfirmed"] == 1 and ps.pending() == (0, 0)
    _settle(ps, taken=[24])  # the word of the incarnation that is gone: nothing held for it
    assert ps.stats()["tensors_unconfirmed"] == 1
    _settle(ps, taken=[25])
    assert ps.stats()["tensors_unconfirmed"] == 0 and ps.pending() == (0, 0)
    ps.flush(timeout=10)
    assert ps.stats()["tensors_sent"] == 1


def test_a_held_tensor_given_back_after_its_step_was_cleaned_up_fails_its_send(ps):
    handle = ps.send("t", pattern(NBYTES, 5), to=WORKER, step_id=7)
    _read_first_and_end(ps, "t", 7, request_id=26)
    ps.cleanup_step(7)
    _settle(ps, dropped=[26])
    with pytest.raises(tv.AbortedError, match="step 7 was cleaned up"):
        handle.wait(60)
    assert ps.pending() == (0, 0)
    ps.flush(timeout=10)


def test_a_late_call_of_a_receivers_earlier_incarnation_is_refused_and_takes_nothing_back(ps):
    ps.send("t", pattern(NBYTES, 6), to=WORKER, step_id=8)
    _read_first_and_end(ps, "t", 8, request_id=27, incarnation=5)
    _read_first_and_end(ps, "t", 8, request_id=28, incarnation=6)  # the next incarnation takes it
    with pytest.raises(grpc.RpcError) as refused:
        _read_first_and_end(ps, "t", 8, request_id=29, incarnation=5)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE, refused.value.details()
    assert "came late" in refused.value.details()
    assert ps.stats()["tensors_unconfirmed"] == 1 and ps.pending() == (0, 0)  # still held for incarnation 6
    _settle(ps, taken=[28])
    ps.flush(timeout=10)
