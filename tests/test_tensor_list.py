"""TensorList: several tensors under one key, moved as one tensor (one request, one
SendHandle) and received as a list of arrays in order; every variant, the sender in a
process of its own (tests/tensor_lists.py), bytes compared. And the packing's own checks:
a malformed list from a peer is DataLossError, never anything else."""
from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tensorverbs as tv
from tensorverbs.local_cluster import same
from tensorverbs.tensor_list import is_packed, unpack
from tensor_lists import tensors

WAIT = 60.0


def _same_list(got, want) -> bool:
    return isinstance(got, list) and len(got) == len(want) and all(same(g, w) for g, w in zip(got, want))


def test_a_list_arrives_as_a_list_in_order(pair, step):
    pair.ps.run("tensor_lists:send_list", "group", pair.WORKER, step, step)
    assert _same_list(pair.worker.recv("group", pair.PS, step, timeout=WAIT), tensors(step))


def test_a_lists_send_completes_once_its_receiver_has_it(pair, step):
    handle = pair.worker.send("group", tv.TensorList(tensors(step)), pair.PS, step)
    assert not handle.done()
    assert pair.ps.run("tensor_lists:received_as_sent", "group", pair.WORKER, step, step)
    handle.wait(timeout=WAIT)


def test_lists_in_futures_batches_and_broadcasts(pair, step):
    for name in ("a", "b"):
        pair.ps.run("tensor_lists:send_list", name, pair.WORKER, step, step)
    pair.ps.send_pattern("plain", pair.WORKER, step, 100, step)
    assert _same_list(pair.worker.recv_async("a", pair.PS, step, timeout=WAIT).result(WAIT), tensors(step))
    b, plain = pair.worker.recv_many([("b", pair.PS, step), ("plain", pair.PS, step)], timeout=WAIT)
    assert _same_list(b, tensors(step)) and plain.shape == (100,)
    pair.ps.run("tensor_lists:send_list", "c", [pair.WORKER], step, step)  # a broadcast of one
    assert _same_list(pair.worker.recv("c", pair.PS, step, timeout=WAIT), tensors(step))


def test_a_list_into_out_is_refused_and_kept(pair, step):
    pair.ps.run("tensor_lists:send_list", "group", pair.WORKER, step, step)
    with pytest.raises(tv.InvalidArgumentError, match="TensorList"):
        pair.worker.recv("group", pair.PS, step, timeout=WAIT, out=np.empty(4, np.float32))
    assert _same_list(pair.worker.recv("group", pair.PS, step, timeout=WAIT), tensors(step))


def test_a_tasks_own_list(pair, step):
    pair.worker.send("mine", tv.TensorList(tensors(step, big=100)), pair.WORKER, step)
    assert _same_list(pair.worker.recv("mine", pair.WORKER, step, timeout=WAIT), tensors(step, big=100))


def test_a_list_as_torch_tensors(pair, step):
    torch = pytest.importorskip("torch")
    pair.ps.run("tensor_lists:send_list", "group", pair.WORKER, step, step)
    got = pair.worker.recv("group", pair.PS, step, timeout=WAIT, tensor_type="torch")
    assert all(isinstance(t, torch.Tensor) for t in got)
    assert got[4].dtype == torch.bfloat16 and tuple(got[0].shape) == (10, 100)
    assert same(got[0].numpy(), tensors(step)[0])


def test_what_a_list_cannot_hold_is_refused():
    with pytest.raises(tv.InvalidArgumentError, match="not numeric"):
        tv.TensorList([np.ones(2), np.array([b"x"], dtype=object)])
    with pytest.raises(tv.InvalidArgumentError, match="list of tensors"):
        tv.TensorList(5)


def test_a_packed_list_round_trips_every_dtype_and_shape():
    items = tensors(3, big=1000) + [np.arange(8, dtype=">i4"), np.ones((2, 1, 3), np.complex64)[:, :, ::2]]
    packed = tv.TensorList(items).pack()
    assert is_packed(packed)
    got = unpack(packed)
    assert _same_list(got, [np.array(a, order="C", dtype=a.dtype.newbyteorder("=")) for a in items])
    assert all(type(a) is np.ndarray for a in got)


@given(st.binary(max_size=300), st.integers(0, 600))
def test_a_malformed_list_from_a_peer_is_data_loss(noise, cut):
    packed = tv.TensorList(tensors(1, big=64)).pack().view(np.uint8)
    for raw in (np.frombuffer(b"TVLS" + noise, np.uint8),  # a header of noise
                packed[:cut],                                 # cut short
                _with(packed, 9, struct.pack("<i", 77)),      # an unknown DataType
                _with(packed, 14, struct.pack("<q", -1))):    # a negative dimension
        array = np.ascontiguousarray(raw).view(tv.tensor.VARIANT_DTYPE)
        try:
            unpack(array)
        except tv.DataLossError:
            pass


def _with(packed: np.ndarray, at: int, patch: bytes) -> np.ndarray:
    out = packed.copy()
    out[at:at + len(patch)] = np.frombuffer(patch, np.uint8)
    return out
